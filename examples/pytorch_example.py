#!/usr/bin/env python3
"""pytorch_example — PyTorch on a real GPU: tensors, a cuBLAS matmul, an NCCL all_reduce.

What it shows: memory that PyTorch's caching allocator takes from the driver (the segments),
cuBLAS's workspace, and NCCL's internal buffers (category "nccl") created by
torch.distributed with a world of one process, all in one memtrace snapshot.

Needs a CUDA GPU and PyTorch built with CUDA; the simulated device cannot run PyTorch
(its bundled CUDA runtime needs driver internals the simulation does not provide).

Run:
    build/bin/memtrace run -- python3 examples/pytorch_example.py
Then open memtrace-<pid>.pickle at https://pytorch.org/memory_viz

Without PyTorch it prints "torch not installed" and exits with status 0.
"""
import os
import sys
import tempfile


def report_usage(torch) -> None:
    """The figures memtrace's own are read against on a GPU: PyTorch's allocator, the driver
    (device-wide, every process) and NVML (this process, including what no API hook sees)."""
    free_b, total_b = torch.cuda.mem_get_info()
    line = (f"at exit: PyTorch allocated {torch.cuda.memory_allocated()} reserved {torch.cuda.memory_reserved()}; "
            f"driver used {total_b - free_b} of {total_b}")
    try:
        import subprocess
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
        mine = [int(r.split(",")[1]) for r in out.splitlines() if r.split(",")[0].strip() == str(os.getpid())]
        line += f"; NVML this process {sum(mine)} MiB" if mine else "; NVML: this process not listed"
    except Exception as e:  # noqa: BLE001 - a missing nvidia-smi only loses one figure
        line += f"; NVML: unavailable ({type(e).__name__})"
    print(line)


def main() -> int:
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        print("torch not installed")
        return 0

    if not torch.cuda.is_available():
        print("pytorch_example: CUDA is not available to PyTorch (no GPU or a CPU-only build); nothing to do")
        return 0

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)

    # A few tensors of different sizes.
    a = torch.randn(2048, 2048, device=device)          # 16 MiB
    b = torch.randn(2048, 2048, device=device)          # 16 MiB
    small = torch.ones(1000, device=device)              # 4 KB, from the small pool
    print(f"allocated tensors: a {tuple(a.shape)}, b {tuple(b.shape)}, small {tuple(small.shape)}")

    # A matmul goes through cuBLAS, which makes its own workspace on first use.
    c = a @ b
    torch.cuda.synchronize()
    expected = (a[0] * b[:, 0]).sum().item()
    if abs(c[0, 0].item() - expected) > 1e-2 * max(1.0, abs(expected)):
        print(f"pytorch_example: matmul result {c[0, 0].item()} differs from {expected}", file=sys.stderr)
        return 1
    print("cuBLAS matmul: 2048x2048 @ 2048x2048 checked")

    # NCCL through torch.distributed, one process, rendezvous through a file store.
    with tempfile.TemporaryDirectory(prefix="memtrace-example-") as tmp:
        store = os.path.join(tmp, "store")
        dist.init_process_group("nccl", init_method=f"file://{store}", rank=0, world_size=1)
        try:
            t = torch.full((1024 * 1024,), 3.0, device=device)  # 4 MiB
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
            torch.cuda.synchronize()
            if not torch.all(t == 3.0).item():
                print("pytorch_example: all_reduce with world size 1 changed the tensor", file=sys.stderr)
                return 1
            print("NCCL all_reduce over 1 rank: checked")
        finally:
            dist.destroy_process_group()

    del a, b, c, small
    torch.cuda.empty_cache()
    report_usage(torch)
    print(f"pytorch_example: done; PyTorch reserved {torch.cuda.memory_reserved()} bytes at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
