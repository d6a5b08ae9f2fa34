#include <cstdio>
__device__ float twice(float v) { return 2 * v; }
extern "C" int run(char *out, int n) {
  int count = 0; cudaError_t e = cudaGetDeviceCount(&count);
  void *p = 0; if (e == cudaSuccess) e = cudaMalloc(&p, 128);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  snprintf(out, n, "%s (%d)", e == cudaSuccess ? "runtime up, nothing launched" : cudaGetErrorString(e), (int)e);
  return (int)e;
}
