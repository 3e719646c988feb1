"""Four synthetic allocation workloads for the replay tests, deterministic for a given seed.

A workload is a list of operations:
  ("malloc", id, size, stream, site)   allocate `size` bytes on `stream`; `site` names the call path
  ("free", id)                          free what malloc `id` returned
  ("empty_cache", site)                 torch.cuda.empty_cache(), called from `site`
Every id is allocated once and freed at most once; what is still allocated at the end stays live in
the snapshot's segments.
"""

import random

KIB = 1024
MIB = 1024 * KIB

STREAM_DEFAULT = 0
STREAM_SIDE = 0x55D0C0A1B2C0   # a raw cudaStream_t value, as PyTorch records them


class _Ops:
    def __init__(self):
        self.ops = []
        self._next = 0
        self.live = set()

    def malloc(self, size, site, stream=STREAM_DEFAULT):
        i = self._next
        self._next += 1
        self.ops.append(("malloc", i, int(size), stream, site))
        self.live.add(i)
        return i

    def free(self, i):
        self.live.remove(i)
        self.ops.append(("free", i))

    def empty_cache(self, site):
        self.ops.append(("empty_cache", site))


def training(seed=1):
    """A training loop: parameters and optimizer state allocated once; per step a forward pass that
    stacks up activations layer by layer (plus short-lived temporaries), a backward pass that frees
    them in reverse while gradients come and go, and an optimizer step. The batch grows over the run
    so the activation stack does too."""
    rng = random.Random(seed)
    o = _Ops()
    hidden = 1536
    layers = 10
    params = []
    for layer in range(layers):
        params.append(o.malloc(hidden * hidden * 4 // 3, "init_weight"))     # ~3 MiB weights
        params.append(o.malloc(hidden * 4, "init_bias"))
    optimizer = [o.malloc(hidden * hidden * 4 // 3, "adam_state") for _ in range(layers)]
    for step in range(6):
        batch = 8 + 4 * step
        acts = []
        inp = o.malloc(batch * 128 * 4 * 7 + rng.randrange(0, 512), "load_batch")
        for layer in range(layers):
            tmp = o.malloc(batch * hidden * 2 + rng.randrange(1, 4096), "matmul_workspace")
            act = o.malloc(batch * hidden * 16 + rng.randrange(0, 2048), "linear_forward")
            mask = o.malloc(batch * hidden // 2 + 13, "dropout_mask")
            o.free(tmp)
            acts.append((act, mask))
        loss = o.malloc(4, "loss")
        grads = []
        for layer in reversed(range(layers)):
            act, mask = acts.pop()
            g_in = o.malloc(batch * hidden * 16 + rng.randrange(0, 2048), "linear_backward")
            g_w = o.malloc(hidden * hidden * 4 // 3, "weight_grad")
            o.free(mask)
            o.free(act)
            scratch = o.malloc(rng.choice([3000, 70 * KIB, 600 * KIB]), "reduce_scratch")
            o.free(scratch)
            grads.append(g_w)
            o.free(g_in)
        o.free(loss)
        o.free(inp)
        for g in grads:
            upd = o.malloc(hidden * hidden * 4 // 3, "adam_update")
            o.free(upd)
            o.free(g)
    return o.ops


def inference(seed=2):
    """A variable-length inference loop: each request has a random prompt length; its KV cache is
    reallocated larger as tokens are generated (the torch.cat pattern: new buffer, copy, free old),
    with per-token temporaries; everything of the request is freed when it finishes."""
    rng = random.Random(seed)
    o = _Ops()
    weights = [o.malloc(n, "load_weights") for n in (48 * MIB, 6 * MIB + 123 * KIB, 24 * MIB, 700 * KIB)]
    layers = 4
    per_token = 2 * 1024 * 2    # bytes of K and V per token per layer (fp16, width 1024)
    for request in range(14):
        seq = rng.randrange(16, 1500)
        cache = [o.malloc(seq * per_token, "kv_cache_prefill") for _ in range(layers)]
        prefill = o.malloc(seq * 1024 * 2 * 4, "prefill_activations")
        o.free(prefill)
        for token in range(rng.randrange(8, 40)):
            seq += 1
            if token % 6 == 5:
                # Grow the cache in chunks: allocate the bigger one before freeing the old one.
                for layer in range(layers):
                    bigger = o.malloc((seq + 64) * per_token, "kv_cache_grow")
                    o.free(cache[layer])
                    cache[layer] = bigger
            logits = o.malloc(32000 * 2 + rng.randrange(0, 100), "logits")
            attn = o.malloc(seq * 16 * 4 + 37, "attention_scores")
            o.free(attn)
            o.free(logits)
        for c in cache:
            o.free(c)
    return o.ops


def fragmentation(seed=3):
    """A fragmentation-heavy mix: interleaved small, large and odd sizes on two streams, each
    allocation living a random number of operations."""
    rng = random.Random(seed)
    o = _Ops()
    pending = []   # (op index at which to free, id)
    for t in range(1100):
        kind = rng.random()
        if kind < 0.45:
            size = rng.randrange(1, 96 * KIB)
            site = "small_tensor"
        elif kind < 0.75:
            size = rng.randrange(1 * MIB, 9 * MIB) + rng.randrange(0, 4096)
            site = "medium_tensor"
        elif kind < 0.93:
            size = rng.randrange(11 * MIB, 70 * MIB) + 777
            site = "large_tensor"
        else:
            size = rng.choice([1 * MIB + 1, 2 * MIB - 1, 10 * MIB - 512, 10 * MIB, 20 * MIB + 1, 513])
            site = "odd_tensor"
        stream = STREAM_SIDE if rng.random() < 0.25 else STREAM_DEFAULT
        i = o.malloc(size, site, stream)
        pending.append((t + rng.choice([1, 2, 3, 8, 30, 120, 600]), i))
        pending.sort()
        while pending and pending[0][0] <= t:
            o.free(pending.pop(0)[1])
    # Leave some of the long-lived ones live at the end.
    for _, i in pending[: len(pending) // 2]:
        o.free(i)
    return o.ops


def phases(seed=4):
    """Training in phases with torch.cuda.empty_cache() between them, as scripts do to hand memory
    back between stages: a short-sequence training phase, a validation pass that empties the cache
    after every batch (its logits still alive at the call, freed just after), then fine-tuning at
    twice the sequence length with a fresh optimizer state (allocated right after the call, so the
    call's segment frees are followed by a segment_alloc, as an out-of-memory retry's would be).
    Each phase's activations are sizes the previous phase's cached segments cannot serve, so a replay
    that kept those segments would reserve them all at once."""
    rng = random.Random(seed)
    o = _Ops()
    hidden = 4096
    layers = 12
    params = [o.malloc(hidden * hidden * 2 + 4096 * rng.randrange(0, 3), "init_weight") for _ in range(layers)]
    params += [o.malloc(hidden * 2, "init_bias") for _ in range(layers)]

    def train(steps, batch, seq, site):
        for step in range(steps):
            acts = []
            inp = o.malloc(batch * seq * 8 + rng.randrange(0, 512), "load_batch")
            for layer in range(layers):
                tmp = o.malloc(batch * seq * hidden // 2 + rng.randrange(1, 4096), "matmul_workspace")
                act = o.malloc(batch * seq * hidden * 2 + rng.randrange(0, 1 << 20), site)
                o.free(tmp)
                acts.append(act)
            loss = o.malloc(4, "loss")
            grads = []
            for layer in reversed(range(layers)):
                g_in = o.malloc(batch * seq * hidden * 2 + rng.randrange(0, 1 << 20), "linear_backward")
                g_w = o.malloc(hidden * hidden * 2, "weight_grad")
                o.free(acts.pop())
                o.free(g_in)
                grads.append(g_w)
            o.free(loss)
            o.free(inp)
            for g in grads:
                o.free(g)

    train(3, 4, 512, "linear_forward")
    o.empty_cache("end_of_phase")
    for batch in range(4):
        inp = o.malloc(16 * 768 * 8 + rng.randrange(0, 512), "load_val_batch")
        h = o.malloc(16 * 768 * hidden * 2 + rng.randrange(0, 1 << 20), "val_forward")
        for layer in range(layers - 1):
            nxt = o.malloc(16 * 768 * hidden * 2 + rng.randrange(0, 1 << 20), "val_forward")
            o.free(h)
            h = nxt
        out = o.malloc(16 * 32000 * 8, "val_logits")
        o.free(h)
        o.free(inp)
        o.empty_cache("validation_loop")   # the logits are still alive: the free comes next
        o.free(out)
    o.empty_cache("end_of_phase")
    momentum = [o.malloc(hidden * hidden * 4, "optimizer_state") for _ in range(layers)]
    train(3, 4, 1024, "linear_forward_long")
    return o.ops


WORKLOADS = {"training": training, "inference": inference, "fragmentation": fragmentation, "phases": phases}
