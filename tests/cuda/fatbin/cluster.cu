// sm_90+ only: thread-block clusters are recorded in the cubin (EIATTR_CTA_PER_CLUSTER).
__global__ void __cluster_dims__(2, 1, 1) clustered(int* x) { x[blockIdx.x] = blockIdx.x; }
