// CUDA Graphs for the backend: a decode step is recorded once and replayed
// per token, so its ~10 launches per layer cost one graph launch.
//
// Recording needs a stream other than the legacy default one (the backend's
// stream unless set_stream installed another): graph_begin switches the
// backend to a private stream, ordered after the work already queued, and
// starts a relaxed-mode capture there; every op queued until graph_end is
// recorded instead of run. graph_end switches back and instantiates the
// graph. Replays are queued on the backend's current stream, so they stay
// ordered with the copies around them (the step's index upload, the logits
// read-back).
#include "cuda/common.cuh"

extern "C" mf_status mf_cuda_graph_begin(mf_backend *be) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    if (c->capturing) return mf_fail(MF_ERR_INVALID_ARG, "graph_begin: a graph is being recorded already");
    if (c->fatal) return mf_fail(MF_ERR_CUDA, "graph_begin: an earlier kernel faulted; the CUDA context is unusable");
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    MF_CUDA_TRY(cudaStreamIsCapturing(c->stream, &cs));
    if (cs != cudaStreamCaptureStatusNone) // our capture stream would be pulled into theirs
        return mf_fail(MF_ERR_UNSUPPORTED, "graph_begin: the backend's stream is being captured by someone else");
    if (!c->capture) MF_CUDA_TRY(cudaStreamCreateWithFlags(&c->capture, cudaStreamNonBlocking));
    MF_CUDA_TRY(cudaEventRecord(c->switch_event, c->stream));
    MF_CUDA_TRY(cudaStreamWaitEvent(c->capture, c->switch_event, 0));
    MF_CUDA_TRY(cudaStreamBeginCapture(c->capture, cudaStreamCaptureModeRelaxed));
    c->capture_prev = c->stream;
    c->stream = c->capture;
    c->capturing = true;
    return MF_OK;
}

extern "C" mf_status mf_cuda_graph_end(mf_backend *be, void **graph) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    *graph = nullptr;
    if (!c->capturing) return mf_fail(MF_ERR_INVALID_ARG, "graph_end: no graph is being recorded");
    cudaGraph_t g = nullptr;
    cudaError_t e = cudaStreamEndCapture(c->capture, &g);
    c->stream = c->capture_prev;
    c->capturing = false;
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        if (g) cudaGraphDestroy(g);
        return mf_fail(MF_ERR_CUDA, "graph_end: recording failed: %s (%s)", cudaGetErrorString(e),
                       cudaGetErrorName(e));
    }
    cudaGraphExec_t x = nullptr;
    e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return mf_fail(MF_ERR_CUDA, "graph_end: cudaGraphInstantiate failed: %s (%s)", cudaGetErrorString(e),
                       cudaGetErrorName(e));
    }
    *graph = x;
    return MF_OK;
}

extern "C" mf_status mf_cuda_graph_launch(mf_backend *be, void *graph) {
    mf_cuda_ctx *c = mf_cuda_ctx_of(be);
    if (c->capturing) return mf_fail(MF_ERR_INVALID_ARG, "graph_launch: called while a graph is being recorded");
    MF_CUDA_TRY(cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), c->stream));
    // A replayed embed counts bad token ids on the device as a live one does:
    // make the next sync read the counter.
    c->err_pending = true;
    return MF_OK;
}

extern "C" void mf_cuda_graph_free(mf_backend *be, void *graph) {
    (void)be;
    if (graph && cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph)) != cudaSuccess) (void)cudaGetLastError();
}
