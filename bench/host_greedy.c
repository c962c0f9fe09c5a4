// Host greedy cost (docs/notes/decode.md): mf_sampler_sample at temperature 0
// over V random f32 logits, p5/p50/p95 of 3000 draws, one thread. Build and run:
//   gcc -O2 -Iinclude bench/host_greedy.c build/libminfer.a -lopenblas -lcjson -lpcre2-8 -lm -fopenmp -o /tmp/host_greedy
//   OMP_NUM_THREADS=1 /tmp/host_greedy
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "minfer/generate.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
static int cmp(const void*a,const void*b){double x=*(const double*)a,y=*(const double*)b;return x<y?-1:x>y;}
int main(void){
  const long Vs[3]={32000,50257,151936};
  for(int k=0;k<3;k++){
    long V=Vs[k]; float*x=malloc(V*sizeof*x); srand(1);
    for(long i=0;i<V;i++) x[i]=(float)rand()/RAND_MAX*20-10;
    mf_sampler_params p={0}; mf_sampler*s; mf_sampler_create(&p,V,&s);
    enum{R=3000}; double t[R]; int32_t id; long sink=0;
    for(int r=0;r<R;r++){ x[r%V]+=1e-3f; double a=now(); mf_sampler_sample(s,x,NULL,0,&id); t[r]=now()-a; sink+=id;}
    qsort(t,R,sizeof*t,cmp);
    printf("vocab %6ld: host greedy (mf_sampler_sample, T=0) p50 %.1f us, p5 %.1f us, p95 %.1f us (sink %ld)\n",V,t[R/2]*1e6,t[R/20]*1e6,t[R*19/20]*1e6,sink);
    mf_sampler_free(s); free(x);
  }
  return 0;
}
