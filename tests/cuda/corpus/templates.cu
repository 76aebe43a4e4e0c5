// Covers: C++ templates with several instantiations (mangled names such as
// _Z9fill_scaleIfLi3EEvPT_S0_i), integer and float variants of one kernel.

// out[i] = in[i] * Factor for i < n (elementwise), in the element type T.
// Launch: 1-D, grid*block >= n.
template <typename T, int Factor>
__global__ void fill_scale(T* out, const T* in, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = in[i] * static_cast<T>(Factor);
}

// out[i] = max(a[i], b[i]) in type T.  Launch: 1-D, grid*block >= n.
template <typename T>
__global__ void elementwise_max(const T* a, const T* b, T* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] > b[i] ? a[i] : b[i];
}

template __global__ void fill_scale<float, 3>(float*, const float*, int);
template __global__ void fill_scale<int, 7>(int*, const int*, int);
template __global__ void fill_scale<double, 2>(double*, const double*, int);
template __global__ void elementwise_max<float>(const float*, const float*, float*, int);
template __global__ void elementwise_max<long long>(const long long*, const long long*, long long*, int);
template __global__ void elementwise_max<unsigned short>(const unsigned short*, const unsigned short*, unsigned short*, int);
