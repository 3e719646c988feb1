#!/usr/bin/env python3
"""Writes the golden tests' PyTorch-shaped snapshots into data/ (run once; the files are committed).

Shapes follow docs/snapshot-format.md, "The snapshot dict" (what torch.cuda.memory._dump_snapshot
writes): segments with blocks tiling them, device_traces oldest first, frames innermost first,
identical frame dicts and lists shared (pickle's memo), allocator_settings as PyTorch writes it.
Written with pickle protocols 2, 4 and 5 (5 uses FRAME like PyTorch's own dumps). Plain python3,
deterministic.

    python3 make_pytorch_snapshots.py [OUT_DIR]
"""
import os
import pickle
import sys

T0 = 1767225600000000  # 2026-01-01 00:00:00 UTC
MiB = 1 << 20
_frames = {}


def fr(name, filename, line):
    key = (filename, line, name)
    if key not in _frames:
        _frames[key] = {'filename': filename, 'line': line, 'name': name}
    return _frames[key]


_stacks = {}


def stack(*frames):
    """Innermost first; the same tuple of frames gives the same list object."""
    key = tuple(id(f) for f in frames)
    if key not in _stacks:
        _stacks[key] = list(frames)
    return _stacks[key]


MODULE = fr('<module>', 'train.py', 90)
MAIN = fr('main', 'train.py', 80)
S_FWD = stack(fr('forward', 'model.py', 42), fr('step', 'train.py', 60), MAIN, MODULE)
S_BWD = stack(fr('backward', 'torch/autograd/__init__.py', 251), fr('step', 'train.py', 61), MAIN, MODULE)
S_TMP = stack(fr('attention', 'model.py', 17), fr('forward', 'model.py', 44), fr('step', 'train.py', 60), MAIN, MODULE)
S_SMALL = stack(fr('embed', 'model.py', 9), fr('forward', 'model.py', 40), fr('step', 'train.py', 60), MAIN, MODULE)
S_INIT = stack(fr('load_weights', 'train.py', 20), MAIN, MODULE)
S_OPT = stack(fr('adam_step', 'torch/optim/adam.py', 400), fr('step', 'train.py', 65), MAIN, MODULE)
S_NONE = []


def settings():
    return {
        'PYTORCH_CUDA_ALLOC_CONF': '',
        'max_split_size': -1,
        'garbage_collection_threshold': 0.0,
        'expandable_segments': False,
        'pinned_num_register_threads': 1,
        'release_lock_on_cudamalloc': False,
        'pinned_use_cuda_host_register': False,
        'roundup_power2_divisions': {str(1 << i): 0 for i in range(16)},
    }


def ev(action, addr, size, t, frames=None, stream=0):
    e = {'action': action, 'addr': addr, 'size': size, 'stream': stream, 'time_us': T0 + t,
         'compile_context': '', 'user_metadata': ''}
    if frames is not None:
        e['frames'] = frames
    return e


def free(addr, size, t, frames):
    return [ev('free_requested', addr, size, t, frames), ev('free_completed', addr, size, t + 1, frames)]


def block(size, req, state, frames):
    return {'size': size, 'requested_size': req, 'state': state, 'frames': frames}


def segment(device, address, blocks, seg_type='large', frames=S_NONE):
    addr = address
    for b in blocks:
        b['address'] = addr
        addr += b['size']
    total = addr - address
    live = [b for b in blocks if b['state'] != 'inactive']
    return {'device': device, 'address': address, 'total_size': total,
            'allocated_size': sum(b['size'] for b in blocks if b['state'] == 'active_allocated'),
            'active_size': sum(b['size'] for b in live), 'requested_size': sum(b['requested_size'] for b in live),
            'stream': 0, 'segment_type': seg_type, 'segment_pool_id': (0, 0), 'is_expandable': False,
            'frames': frames, 'blocks': blocks}


A = 0x7f0000000000          # 20 MiB large segment
B = A + 20 * MiB            # 2 MiB small segment
C = 0x7f0003000000          # allocated before recording started
GONE = C + 2 * MiB          # allocated before the history, freed in it (C's segment_alloc is older too)
D1 = 0x7e0000000000         # device 1


def small_training_step():
    """Device 0: a training step whose temporary was freed, a free and a live block from before the
    history (truncated), a small-pool tensor; device 1: one tensor."""
    d0 = [ev('segment_alloc', A, 20 * MiB, 0, S_FWD),
          ev('alloc', A, 8000000, 10, S_FWD),
          ev('alloc', A + 8 * MiB, 4 * MiB, 20, S_BWD),
          ev('alloc', A + 12 * MiB, 6 * MiB - 1000, 30, S_TMP),
          *free(A + 12 * MiB, 6 * MiB - 1000, 40, S_TMP),
          *free(GONE, 1000000, 50, S_OPT),
          ev('segment_alloc', B, 2 * MiB, 60, S_SMALL),
          ev('alloc', B, 400, 70, S_SMALL)]
    d1 = [ev('segment_alloc', D1, 2 * MiB, 15, S_FWD), ev('alloc', D1, MiB, 16, S_FWD)]
    segs = [segment(0, A, [block(8 * MiB, 8000000, 'active_allocated', S_FWD),
                           block(4 * MiB, 4 * MiB, 'active_allocated', S_BWD),
                           block(8 * MiB, 0, 'inactive', S_TMP)], frames=S_FWD),
            segment(0, B, [block(512, 400, 'active_allocated', S_SMALL), block(2 * MiB - 512, 0, 'inactive', S_NONE)],
                    'small', S_SMALL),
            segment(0, C, [block(2 * MiB, 2000000, 'active_allocated', S_INIT), block(2 * MiB, 0, 'inactive', S_NONE)],
                    frames=S_INIT),
            segment(1, D1, [block(MiB, MiB, 'active_allocated', S_FWD), block(MiB, 0, 'inactive', S_NONE)],
                    frames=S_FWD)]
    return {'segments': segs, 'device_traces': [d0, d1], 'allocator_settings': settings(),
            'external_annotations': []}


def later_training_step():
    """The same job later: backward grew, the temporary is now kept (a leak), an optimizer state appeared,
    device 1 unchanged."""
    d0 = [ev('segment_alloc', A, 20 * MiB, 1000, S_FWD),
          ev('alloc', A, 8000000, 1010, S_FWD),
          ev('alloc', A + 8 * MiB, 4 * MiB, 1020, S_BWD),
          ev('alloc', A + 12 * MiB, 6 * MiB - 1000, 1030, S_TMP),
          ev('segment_alloc', B, 2 * MiB, 1060, S_SMALL),
          ev('alloc', B, 400, 1070, S_SMALL),
          ev('alloc', B + 512, 1024, 1080, S_OPT)]
    d1 = [ev('segment_alloc', D1, 2 * MiB, 1015, S_FWD), ev('alloc', D1, MiB, 1016, S_FWD)]
    segs = [segment(0, A, [block(8 * MiB, 8000000, 'active_allocated', S_FWD),
                           block(4 * MiB, 4 * MiB, 'active_allocated', S_BWD),
                           block(6 * MiB, 6 * MiB - 1000, 'active_allocated', S_TMP),
                           block(2 * MiB, 0, 'inactive', S_NONE)], frames=S_FWD),
            segment(0, B, [block(512, 400, 'active_allocated', S_SMALL), block(1024, 1024, 'active_allocated', S_OPT),
                           block(2 * MiB - 1536, 0, 'inactive', S_NONE)], 'small', S_SMALL),
            segment(0, C, [block(2 * MiB, 2000000, 'active_allocated', S_INIT)], frames=S_INIT),
            segment(1, D1, [block(MiB, MiB, 'active_allocated', S_FWD), block(MiB, 0, 'inactive', S_NONE)],
                    frames=S_FWD)]
    return {'segments': segs, 'device_traces': [d0, d1], 'allocator_settings': settings(),
            'external_annotations': []}


def rank_snapshot(rank, extra_mib):
    """One rank of a data-parallel job: the same 64 MiB of weights everywhere, activations that differ."""
    base = 0x7f0000000000
    act = (100 + extra_mib) * MiB
    d0 = [ev('segment_alloc', base, 64 * MiB, 0, S_INIT), ev('alloc', base, 64 * MiB, 1, S_INIT),
          ev('segment_alloc', base + 64 * MiB, act, 2, S_FWD), ev('alloc', base + 64 * MiB, act, 3, S_FWD),
          *free(base + 64 * MiB, act, 4, S_FWD), ev('segment_free', base + 64 * MiB, act, 6, S_FWD)]
    segs = [segment(0, base, [block(64 * MiB, 64 * MiB, 'active_allocated', S_INIT)], frames=S_INIT)]
    return {'segments': segs, 'device_traces': [d0], 'allocator_settings': settings(), 'external_annotations': []}


NCCL = 0x7d0000000000
CUBLAS = 0x7d0001000000
S_NCCL = stack(fr('ncclMemAlloc', 'libnccl.so.2', 0), fr('init_process_group', 'train.py', 30), MAIN, MODULE)
S_CUBLAS = stack(fr('cublasCreate_v2', 'libcublas.so.13', 0), fr('forward', 'model.py', 42), MAIN, MODULE)
S_DRIVER = stack(fr('cudaMalloc', 'libc10_cuda.so', 0), fr('forward', 'model.py', 42), MAIN, MODULE)


def memtrace_side_of_training_step():
    """What memtrace, preloaded into the job of small_training_step(), would write: PyTorch's segments
    seen at the driver (duplicates for merge), NCCL's buffer, a cuBLAS workspace made and freed."""
    def mt(action, addr, size, t, frames, cat):
        e = ev(action, addr, size, t, frames)
        e['category'] = cat
        return e

    def mt_alloc(addr, size, t, frames, cat):
        return [mt('segment_alloc', addr, size, t, frames, cat), mt('alloc', addr, size, t, frames, cat)]

    def mt_free(addr, size, t, frames, cat):
        return [mt('free_requested', addr, size, t, frames, cat), mt('free_completed', addr, size, t, frames, cat),
                mt('segment_free', addr, size, t, frames, cat)]

    d0 = [*mt_alloc(A, 20 * MiB, -1, S_DRIVER, 'torch'),
          *mt_alloc(NCCL, 8 * MiB, 5, S_NCCL, 'nccl'),
          *mt_alloc(CUBLAS, 4 * MiB, 25, S_CUBLAS, 'cublas'),
          *mt_free(CUBLAS, 4 * MiB, 35, S_CUBLAS, 'cublas'),
          *mt_alloc(B, 2 * MiB, 59, S_DRIVER, 'torch'),
          mt('snapshot', 0, 0, 80, S_NONE, 'unknown')]
    d1 = [*mt_alloc(D1, 2 * MiB, 14, S_DRIVER, 'torch')]
    segs = [segment(0, NCCL, [block(8 * MiB, 8 * MiB, 'active_allocated', S_NCCL)], frames=S_NCCL),
            segment(0, A, [block(20 * MiB, 20 * MiB, 'active_allocated', S_DRIVER)], frames=S_DRIVER),
            segment(0, B, [block(2 * MiB, 2 * MiB, 'active_allocated', S_DRIVER)], frames=S_DRIVER),
            segment(0, C, [block(4 * MiB, 4 * MiB, 'active_allocated', S_DRIVER)], frames=S_DRIVER),
            segment(1, D1, [block(2 * MiB, 2 * MiB, 'active_allocated', S_DRIVER)], frames=S_DRIVER)]
    segs.sort(key=lambda s: (s['device'], s['address']))
    st = settings()
    st['memtrace'] = {'version': '0.1.0', 'pid': 4242, 'exe': '/usr/bin/python3', 'host': 'node7', 'rank': '0',
                      'reason': 'exit', 'entries_dropped': 0}
    return {'segments': segs, 'device_traces': [d0, d1], 'allocator_settings': st, 'external_annotations': []}


# A stack as PyTorch records it with context='all': its own unwinder first, the caching allocator,
# the op dispatcher, the op, the Python binding, the interpreter with the Python frames merged in,
# the start of the process. Only the op, the Python frames and the user's own native code tell two
# such stacks apart.
CPP_ALLOC = [fr('torch::unwind::unwind()', '??', 0),
             fr('torch::CapturedTraceback::gather(bool, bool, bool)', '/pytorch/torch/csrc/profiler/combined_traceback.cpp', 0),
             fr('c10::cuda::CUDACachingAllocator::Native::(anonymous namespace)::gather_with_cpp()', '??', 0),
             fr('c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, '
                'CUstream_st*)', '/pytorch/c10/cuda/CUDACachingAllocator.cpp', 0),
             fr('c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned long)', '??', 0),
             fr('at::TensorBase at::detail::_empty_generic<long>(c10::ArrayRef<long>, c10::Allocator*, '
                'c10::DispatchKeySet, c10::ScalarType, std::optional<c10::MemoryFormat>)', '??', 0),
             fr('at::detail::empty_cuda(c10::ArrayRef<long>, c10::ScalarType, std::optional<c10::Device>, '
                'std::optional<c10::MemoryFormat>)', '??', 0),
             fr('at::(anonymous namespace)::(anonymous namespace)::wrapper_CUDA_mm(at::Tensor const&, at::Tensor const&)',
                '??', 0),
             fr('c10::impl::wrap_kernel_functor_unboxed_<c10::impl::detail::WrapFunctionIntoFunctor_<...>>::call(...)',
                '??', 0),
             fr('at::_ops::mm::call(at::Tensor const&, at::Tensor const&)', '??', 0)]
CPP_GLUE = [fr('torch::autograd::THPVariable_matmul(_object*, _object*, _object*)', '??', 0),
            fr('cfunction_call', '/usr/local/src/conda/python-3.12.7/Objects/methodobject.c', 537),
            fr('_PyObject_MakeTpCall', '??', 0),
            fr('_PyEval_EvalFrameDefault', '??', 0)]
CPP_START = [fr('PyEval_EvalCode', '??', 0), fr('run_eval_code_obj', '??', 0), fr('run_mod', '??', 0),
             fr('_PyRun_SimpleFileObject', '??', 0), fr('Py_RunMain', '??', 0), fr('Py_BytesMain', '??', 0),
             fr('__libc_start_call_main', '../sysdeps/nptl/libc_start_call_main.h', 58),
             fr('__libc_start_main', '../csu/libc-start.c', 360), fr('_start', '??', 0)]
SITE = '/opt/conda/lib/python3.12/site-packages/'


def cpp_stack(op, *python):
    return stack(*CPP_ALLOC, op, *CPP_GLUE, *python, *CPP_START)


def oom_training_step():
    """A step that runs out of memory: two stacks that differ only in the Python frames, one in the
    op, and an oom entry whose request was larger than the biggest free piece but smaller than the
    free space in the segment: fragmentation."""
    mm = fr('at::native::mm(at::Tensor const&, at::Tensor const&)', '??', 0)
    lin = fr('at::native::linear(at::Tensor const&, at::Tensor const&, std::optional<at::Tensor> const&)', '??', 0)
    fwd = fr('forward', SITE + 'torch/nn/modules/linear.py', 125)
    call = fr('_call_impl', SITE + 'torch/nn/modules/module.py', 1762)
    s_q = cpp_stack(lin, fwd, call, fr('forward', '/home/me/model.py', 30), fr('step', '/home/me/train.py', 60),
                    fr('<module>', '/home/me/train.py', 90))
    s_k = cpp_stack(lin, fwd, call, fr('forward', '/home/me/model.py', 31), fr('step', '/home/me/train.py', 60),
                    fr('<module>', '/home/me/train.py', 90))
    s_att = cpp_stack(mm, fr('attention', '/home/me/model.py', 17), fr('forward', '/home/me/model.py', 44),
                      fr('step', '/home/me/train.py', 60), fr('<module>', '/home/me/train.py', 90))
    E = 0x7f4000000000
    d0 = [ev('segment_alloc', E, 64 * MiB, 0, s_q),
          ev('alloc', E, 16 * MiB, 10, s_q),
          ev('alloc', E + 16 * MiB, 16 * MiB, 20, s_k),
          ev('alloc', E + 32 * MiB, 16 * MiB, 30, s_att),
          *free(E + 16 * MiB, 16 * MiB, 40, s_k),
          {'action': 'oom', 'size': 24 * MiB, 'stream': 0, 'time_us': T0 + 50, 'device_free': 10 * MiB,
           'compile_context': '', 'user_metadata': '', 'frames': s_att}]
    segs = [segment(0, E, [block(16 * MiB, 16 * MiB, 'active_allocated', s_q),
                           block(16 * MiB, 0, 'inactive', S_NONE),
                           block(16 * MiB, 16 * MiB, 'active_allocated', s_att),
                           block(16 * MiB, 0, 'inactive', S_NONE)], frames=s_q)]
    return {'segments': segs, 'device_traces': [d0], 'allocator_settings': settings(), 'external_annotations': []}


def pinned_training_step():
    """The small training step with pinned host memory (host_segments, device -1, and one flat
    host_traces list): a DataLoader's pinned batch still live, a staging buffer freed in the
    history, and a pinned block from before the history."""
    s = small_training_step()
    pin = stack(fr('pin_memory', SITE + 'torch/utils/data/_utils/pin_memory.py', 70),
                fr('_next_data', SITE + 'torch/utils/data/dataloader.py', 1480), fr('step', 'train.py', 58), MAIN, MODULE)
    stage = stack(fr('save_checkpoint', 'train.py', 70), MAIN, MODULE)
    H1, H2, H0 = 0x7f9000000000, 0x7f9000400000, 0x7f8f00000000
    host_traces = [ev('segment_alloc', H1, 4 * MiB, 5, pin), ev('alloc', H1, 3 * MiB, 6, pin),
                   ev('segment_alloc', H2, 2 * MiB, 80, stage), ev('alloc', H2, 2 * MiB, 81, stage),
                   *free(H2, 2 * MiB, 90, stage), ev('segment_free', H2, 2 * MiB, 92, stage)]
    s['host_segments'] = [segment(-1, H1, [block(3 * MiB, 3 * MiB, 'active_allocated', pin),
                                           block(MiB, 0, 'inactive', S_NONE)], frames=pin),
                          segment(-1, H0, [block(MiB, MiB, 'active_allocated', S_INIT)], frames=S_INIT)]
    s['host_traces'] = host_traces
    return s


def newer_keys_training_step():
    """The small training step with what newer PyTorch writes and memtrace does not interpret, for
    `memtrace merge` to carry unchanged: user_metadata as a string and as a dict, compile_context,
    an `annotate` entry, external_annotations (record_function scopes: name, stage, device,
    time_us), an expandable segment with its segment_map/segment_unmap, pinned host memory, a
    private pool id, PyTorch's full allocator_settings, and keys no version has yet at every level.
    Only values the viewer's unpickler reads (str, int, float, bool, None, list, dict, pairs)."""
    s = pinned_training_step()
    d0 = s['device_traces'][0]
    d0[1]['user_metadata'] = 'batch 3'
    d0[2]['user_metadata'] = {'layer': 'encoder.1', 'step': 7, 'tags': ['fwd', None, 1.5]}
    d0[3]['compile_context'] = 'Torch-Compiled Region: 0/1'
    d0[3]['future_entry_key'] = [1, 2.5, None, True]
    d0.insert(4, {'action': 'annotate', 'time_us': T0 + 35, 'name': 'forward', 'stage': 'START', 'device': 0,
                  'compile_context': '', 'user_metadata': ''})
    X = 0x7f2000000000  # an expandable segment: mapped, partly unmapped
    d0 += [ev('segment_map', X, 4 * MiB, 100, S_FWD), ev('alloc', X, 2 * MiB, 101, S_FWD),
           ev('segment_unmap', X + 2 * MiB, 2 * MiB, 102, S_FWD)]
    seg = segment(0, X, [block(2 * MiB, 2 * MiB, 'active_allocated', S_FWD)], frames=S_FWD)
    seg['is_expandable'] = True
    s['segments'].append(seg)
    s['segments'].sort(key=lambda x: (x['device'], x['address']))
    s['segments'][0]['segment_pool_id'] = (1, 2)
    s['segments'][0]['future_segment_key'] = {'owner': 'graph 3'}
    s['segments'][0]['blocks'][0]['future_block_key'] = 'kept'
    s['segments'][0]['blocks'][0]['user_metadata'] = 'weights'
    s['host_traces'][1]['user_metadata'] = 'pinned batch'
    s['host_segments'][0]['future_host_key'] = 5
    s['external_annotations'] = [{'name': 'forward', 'stage': 'START', 'device': 0, 'time_us': T0 + 5},
                                 {'name': 'forward', 'stage': 'END', 'device': 0, 'time_us': T0 + 45}]
    s['allocator_settings']['graph_capture_record_stream_reuse'] = False
    s['allocator_settings']['future_setting'] = 'on'
    s['future_top_key'] = {'written_by': 'a newer PyTorch', 'n': [1, 2]}
    return s


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data')
    os.makedirs(os.path.join(out, 'ranks'), exist_ok=True)

    def dump(name, obj, protocol):
        with open(os.path.join(out, name), 'wb') as f:
            pickle.dump(obj, f, protocol=protocol)

    step = small_training_step()
    dump('torch_step_p2.pickle', step, 2)
    dump('torch_step_p4.pickle', step, 4)
    dump('torch_step_p5.pickle', step, 5)
    dump('torch_later_p5.pickle', later_training_step(), 5)
    dump('memtrace_step.pickle', memtrace_side_of_training_step(), 4)
    dump('torch_oom_p4.pickle', oom_training_step(), 4)
    dump('torch_pinned_p4.pickle', pinned_training_step(), 4)
    dump('torch_newer_keys_p4.pickle', newer_keys_training_step(), 4)
    for rank, extra in enumerate([0, 2, -1, 60, 1]):  # rank 3 holds 60 MiB more activations
        dump(os.path.join('ranks', f'snapshot_rank{rank}.pickle'), rank_snapshot(rank, extra), 5)


if __name__ == '__main__':
    main()
