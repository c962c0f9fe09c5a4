// CPU emulator of the CUDA backend (src/cuda/emu/): the cooperative groups
// the kernels use: the thread block and the thread-block cluster (sync,
// ranks, distributed shared memory through map_shared_rank). A launch
// without clusters is a cluster of one block, as on sm_90.
#ifndef MF_EMU_COOPERATIVE_GROUPS_H
#define MF_EMU_COOPERATIVE_GROUPS_H

#include "cuda_runtime.h"

namespace cooperative_groups {

struct thread_block {
    void sync(::mf_emu::Loc loc = ::mf_emu::Loc::here()) const { ::mf_emu::syncthreads(loc); }
    unsigned thread_rank() const { return ::mf_emu::view().lin; }
    unsigned size() const { return blockDim.x * blockDim.y * blockDim.z; }
    unsigned num_threads() const { return size(); }
    dim3 group_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
    dim3 thread_index() const { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
    dim3 dim_threads() const { return blockDim; }
};
inline thread_block this_thread_block() { return thread_block(); }

struct cluster_group {
    void sync(::mf_emu::Loc loc = ::mf_emu::Loc::here()) const { ::mf_emu::cluster_sync(loc); }
    template <class T> T *map_shared_rank(T *addr, unsigned rank, ::mf_emu::Loc loc = ::mf_emu::Loc::here()) const {
        return static_cast<T *>(::mf_emu::cluster_map(addr, rank, loc));
    }
    unsigned block_rank() const { return ::mf_emu::cluster_rank(); }
    unsigned num_blocks() const {
        const dim3 d = ::mf_emu::cluster_dims();
        return d.x * d.y * d.z;
    }
    dim3 dim_blocks() const { return ::mf_emu::cluster_dims(); }
    dim3 block_index() const {
        const dim3 d = ::mf_emu::cluster_dims();
        const unsigned r = block_rank();
        return dim3(r % d.x, r / d.x % d.y, r / d.x / d.y);
    }
    unsigned thread_rank() const { return block_rank() * (blockDim.x * blockDim.y * blockDim.z) + ::mf_emu::view().lin; }
    unsigned num_threads() const { return num_blocks() * blockDim.x * blockDim.y * blockDim.z; }
};
inline cluster_group this_cluster() { return cluster_group(); }

} // namespace cooperative_groups

#endif // MF_EMU_COOPERATIVE_GROUPS_H
