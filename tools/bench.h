// `minfer bench <op>`: one entry point per op benchmark (tools/bench_<op>.c).
// Each takes the arguments after the op name and returns the exit code.
#ifndef MF_TOOLS_BENCH_H
#define MF_TOOLS_BENCH_H

int mf_bench_softmax_main(int argc, char **argv);   // bench_softmax.c
int mf_bench_gemm_host_main(int argc, char **argv); // bench_gemm_host.c
int mf_bench_moe_main(int argc, char **argv);       // bench_moe.c
int mf_bench_attention_main(int argc, char **argv); // bench_attention.c
int mf_bench_gemv_main(int argc, char **argv);      // bench_gemv.c
int mf_bench_topk_main(int argc, char **argv);      // bench_topk.c

#endif // MF_TOOLS_BENCH_H
