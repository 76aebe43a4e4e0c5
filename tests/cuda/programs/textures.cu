// Texture and surface objects through the runtime API, each fetch checked against
// what CUDA's programming guide defines (computed here on the CPU): linear and
// pitch-2D resources, 2-D, 3-D, layered and cubemap CUDA arrays, point and linear
// filtering, normalized coordinates with wrap, mirror, clamp and border, element and
// normalized-float reads, tex2Dgather, surface loads and stores with their boundary
// modes, the descriptor queries, and the creations the driver refuses.
// `textures bad_handle` launches a fetch through a handle that names no texture;
// `textures hold` makes a texture, prints held=1, and samples it after a line on
// stdin (a migration asked meanwhile must refuse the job); `textures flat` runs only the linear, pitch-2D and 2-D array forms (what tally
// makes on a GPU) and prints what the other forms' creation returns.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#define CHECK(call)                                                                  \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                         \
      std::printf("FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_)); \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

constexpr int W = 8, H = 4, D = 3, LAYERS = 3, CUBE = 4;

__global__ void fetch_linear(cudaTextureObject_t t, float* out, int n) {
  int i = threadIdx.x;
  if (i < n) out[i] = tex1Dfetch<float>(t, i - 2);
}

// out[y][x] at texel centers (point), at the midpoint of x and x+1 (linear), and with
// x pushed past the left edge (clamp).
__global__ void fetch_2d(cudaTextureObject_t t, float* centers, float* left) {
  int x = threadIdx.x, y = threadIdx.y;
  centers[y * W + x] = tex2D<float>(t, x + 0.5f, y + 0.5f);
  left[y * W + x] = tex2D<float>(t, -3.0f - x, y + 0.5f);
}

__global__ void fetch_2d_linear(cudaTextureObject_t t, float* mid) {
  int x = threadIdx.x, y = threadIdx.y;
  mid[y * W + x] = tex2D<float>(t, x + 1.0f, y + 0.5f);
}

// Normalized coordinates: wrapped one period to the right, mirrored, and past the edge.
__global__ void fetch_normalized(cudaTextureObject_t wrap, cudaTextureObject_t mirror, cudaTextureObject_t border,
                                 float4* wrapped, float4* mirrored, float4* bordered) {
  int x = threadIdx.x, y = threadIdx.y;
  float u = (x + 0.5f) / W, v = (y + 0.5f) / H;
  wrapped[y * W + x] = tex2D<float4>(wrap, u + 1.0f, v);
  mirrored[y * W + x] = tex2D<float4>(mirror, -u, v);
  bordered[y * W + x] = tex2D<float4>(border, u + 1.0f, v);
}

__global__ void fetch_integers(cudaTextureObject_t ints, cudaTextureObject_t bytes, int* out, uchar4* raw) {
  int x = threadIdx.x, y = threadIdx.y;
  out[y * W + x] = tex2D<int>(ints, x + 0.5f, y + 0.5f);
  raw[y * W + x] = tex2D<uchar4>(bytes, x + 0.5f, y + 0.5f);
}

__global__ void fetch_3d(cudaTextureObject_t point, cudaTextureObject_t linear, float* out, float* mid) {
  int x = threadIdx.x, y = threadIdx.y, z = threadIdx.z;
  out[(z * H + y) * W + x] = tex3D<float>(point, x + 0.5f, y + 0.5f, z + 0.5f);
  mid[(z * H + y) * W + x] = tex3D<float>(linear, x + 1.0f, y + 1.0f, z + 1.0f);
}

__global__ void fetch_layered(cudaTextureObject_t t, float* out) {
  int x = threadIdx.x, y = threadIdx.y, layer = threadIdx.z;
  out[(layer * H + y) * W + x] = tex2DLayered<float>(t, x + 0.5f, y + 0.5f, layer);
}

__global__ void fetch_cube(cudaTextureObject_t t, float* out) {
  const float dirs[6][3] = {{1, 0, 0}, {-1, 0, 0}, {0, 1, 0}, {0, -1, 0}, {0, 0, 1}, {0, 0, -1}};
  int f = threadIdx.x;
  out[f] = texCubemap<float>(t, dirs[f][0], dirs[f][1], dirs[f][2]);
}

__global__ void gather(cudaTextureObject_t t, float4* out) {
  int x = threadIdx.x, y = threadIdx.y;
  out[y * W + x] = tex2Dgather<float4>(t, x + 1.0f, y + 1.0f, 0);
}

// Each element += 1000 through a surface; then reads outside (zero mode), a clamped
// write past the right edge, and a 3-D surface's slice copied to the next.
__global__ void surfaces(cudaSurfaceObject_t s, cudaSurfaceObject_t s3, cudaSurfaceObject_t sl, int* outside) {
  int x = threadIdx.x, y = threadIdx.y;
  int v = surf2Dread<int>(s, x * 4, y);
  surf2Dwrite(v + 1000, s, x * 4, y);
  if (x == 0 && y == 0) {
    outside[0] = surf2Dread<int>(s, W * 4, 0, cudaBoundaryModeZero);
    outside[1] = surf2Dread<int>(s, 0, -1, cudaBoundaryModeZero);
  }
  __syncthreads();
  if (x == 0 && y == 0) surf2Dwrite(-7, s, (W + 5) * 4, 1, cudaBoundaryModeClamp);
  for (int z = 0; z + 1 < D; ++z) {
    float4 f = surf3Dread<float4>(s3, x * 16, y, z);
    surf3Dwrite(make_float4(f.x + 1, f.y, f.z, f.w), s3, x * 16, y, z + 1);
    __syncthreads();
  }
  for (int layer = 0; layer < LAYERS; ++layer) surf2DLayeredwrite(layer * 10.0f + y, sl, x * 4, y, layer);
}

// One texel per thread over a grid of blocks (what a best-effort job's sliced and
// PTB variants split).
__global__ void fetch_grid(cudaTextureObject_t t, float* out, int side) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int x = i % side, y = i / side;
  out[i] = tex2D<float>(t, (x + 0.5f) / side, (y + 0.5f) / side);
}

__global__ void bad_fetch(unsigned long long handle, float* out) {
  out[threadIdx.x] = tex1Dfetch<float>(handle, threadIdx.x);
}

static int good(const float* got, const float* want, int n, float tol = 1e-6f) {
  int ok = 0;
  for (int i = 0; i < n; ++i) ok += std::fabs(got[i] - want[i]) <= tol;
  return ok;
}

static cudaTextureDesc texture_desc(cudaTextureAddressMode mode, cudaTextureFilterMode filter,
                                    cudaTextureReadMode read, int normalized) {
  cudaTextureDesc t;
  std::memset(&t, 0, sizeof t);
  t.addressMode[0] = t.addressMode[1] = t.addressMode[2] = mode;
  t.filterMode = filter;
  t.readMode = read;
  t.normalizedCoords = normalized;
  return t;
}

static cudaResourceDesc linear_resource(void* d, size_t bytes) {
  cudaResourceDesc r;
  std::memset(&r, 0, sizeof r);
  r.resType = cudaResourceTypeLinear;
  r.res.linear.devPtr = d;
  r.res.linear.desc = cudaCreateChannelDesc<float>();
  r.res.linear.sizeInBytes = bytes;
  return r;
}

static cudaResourceDesc pitch2d_resource(void* d, size_t pitch, size_t width, size_t height) {
  cudaResourceDesc r;
  std::memset(&r, 0, sizeof r);
  r.resType = cudaResourceTypePitch2D;
  r.res.pitch2D.devPtr = d;
  r.res.pitch2D.desc = cudaCreateChannelDesc<float>();
  r.res.pitch2D.width = width;
  r.res.pitch2D.height = height;
  r.res.pitch2D.pitchInBytes = pitch;
  return r;
}

static cudaResourceDesc array_resource(cudaArray_t a) {
  cudaResourceDesc r;
  std::memset(&r, 0, sizeof r);
  r.resType = cudaResourceTypeArray;
  r.res.array.array = a;
  return r;
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "bad_handle") == 0) {
    float* out;
    CHECK(cudaMalloc(&out, 32 * sizeof(float)));
    bad_fetch<<<1, 32>>>(reinterpret_cast<unsigned long long>(out) + 4096, out);
    cudaError_t e = cudaDeviceSynchronize();
    std::printf("bad_handle=%s\n", cudaGetErrorName(e));
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "hold") == 0) {
    const int n = 64;
    std::vector<float> h(n);
    for (int i = 0; i < n; ++i) h[i] = i * 0.5f;
    float *d, *out;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    CHECK(cudaMalloc(&out, (n + 4) * sizeof(float)));
    CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cudaResourceDesc r = linear_resource(d, n * sizeof(float));
    cudaTextureDesc td = texture_desc(cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, 0);
    cudaTextureObject_t t;
    CHECK(cudaCreateTextureObject(&t, &r, &td, nullptr));
    std::printf("held=1\n");
    std::fflush(stdout);
    char line[64];
    if (std::fgets(line, sizeof line, stdin) == nullptr) return 1;
    fetch_linear<<<1, n + 4>>>(t, out, n + 4);
    std::vector<float> got(n + 4), want(n + 4, 0.0f);
    CHECK(cudaMemcpy(got.data(), out, (n + 4) * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 2; i < n + 2; ++i) want[i] = h[i - 2];
    std::printf("held_good=%d of %d\n", good(got.data(), want.data(), n + 4), n + 4);
    return 0;
  }
  const bool flat = argc > 1 && std::strcmp(argv[1], "flat") == 0;
  float* d_out;
  CHECK(cudaMalloc(&d_out, 4096 * sizeof(float)));
  std::vector<float> got(4096);

  // 1. A linear resource, fetched by index: zero outside.
  {
    const int n = 16;
    std::vector<float> h(n);
    for (int i = 0; i < n; ++i) h[i] = 1.5f * i + 1;
    float* d;
    CHECK(cudaMalloc(&d, n * sizeof(float)));
    CHECK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    cudaResourceDesc r = linear_resource(d, n * sizeof(float));
    cudaTextureDesc td = texture_desc(cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, 0);
    cudaTextureObject_t t;
    CHECK(cudaCreateTextureObject(&t, &r, &td, nullptr));
    fetch_linear<<<1, n + 4>>>(t, d_out, n + 4);
    CHECK(cudaMemcpy(got.data(), d_out, (n + 4) * sizeof(float), cudaMemcpyDeviceToHost));
    std::vector<float> want(n + 4);
    for (int i = 0; i < n + 4; ++i) want[i] = (i - 2 >= 0 && i - 2 < n) ? h[i - 2] : 0.0f;
    std::printf("linear_good=%d of %d\n", good(got.data(), want.data(), n + 4), n + 4);
    cudaResourceDesc back;
    CHECK(cudaGetTextureObjectResourceDesc(&back, t));
    cudaTextureDesc tback;
    CHECK(cudaGetTextureObjectTextureDesc(&tback, t));
    std::printf("resource_desc=%d,%zu texture_desc=%d,%d\n", back.resType == cudaResourceTypeLinear,
                back.res.linear.sizeInBytes, tback.addressMode[0] == cudaAddressModeClamp, tback.normalizedCoords);
    CHECK(cudaDestroyTextureObject(t));
    std::printf("destroy_twice=%d\n", static_cast<int>(cudaDestroyTextureObject(t)));
    cudaGetLastError();
    CHECK(cudaFree(d));
  }

  // 2. Pitch-2D floats: point at centers, clamp left of the edge; linear between columns.
  std::vector<float> plane(W * H);
  for (int y = 0; y < H; ++y)
    for (int x = 0; x < W; ++x) plane[y * W + x] = 10.0f * y + x;
  {
    float* d;
    size_t pitch;
    CHECK(cudaMallocPitch(&d, &pitch, W * sizeof(float), H));
    CHECK(cudaMemcpy2D(d, pitch, plane.data(), W * sizeof(float), W * sizeof(float), H, cudaMemcpyHostToDevice));
    cudaResourceDesc r = pitch2d_resource(d, pitch, W, H);
    cudaTextureDesc td = texture_desc(cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, 0);
    cudaTextureObject_t t, tl;
    CHECK(cudaCreateTextureObject(&t, &r, &td, nullptr));
    td.filterMode = cudaFilterModeLinear;
    CHECK(cudaCreateTextureObject(&tl, &r, &td, nullptr));
    fetch_2d<<<1, dim3(W, H)>>>(t, d_out, d_out + 1024);
    fetch_2d_linear<<<1, dim3(W, H)>>>(tl, d_out + 2048);
    CHECK(cudaMemcpy(got.data(), d_out, 4096 * sizeof(float), cudaMemcpyDeviceToHost));
    std::vector<float> left(W * H), mid(W * H);
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        left[y * W + x] = plane[y * W];
        mid[y * W + x] = x + 1 < W ? 0.5f * (plane[y * W + x] + plane[y * W + x + 1]) : plane[y * W + x];
      }
    std::printf("pitch2d_good=%d of %d clamp_good=%d of %d linear2d_good=%d of %d\n",
                good(got.data(), plane.data(), W * H), W * H, good(got.data() + 1024, left.data(), W * H), W * H,
                good(got.data() + 2048, mid.data(), W * H, 1e-4f), W * H);
    CHECK(cudaDestroyTextureObject(t));
    CHECK(cudaDestroyTextureObject(tl));
    CHECK(cudaFree(d));
  }

  // 3. A 2-D array of uchar4 read as normalized floats: wrap, mirror, border.
  {
    std::vector<uchar4> texels(W * H);
    for (int i = 0; i < W * H; ++i) texels[i] = make_uchar4(i, 2 * i, 255 - i, 51);
    cudaChannelFormatDesc c = cudaCreateChannelDesc<uchar4>();
    cudaArray_t a;
    CHECK(cudaMallocArray(&a, &c, W, H));
    CHECK(cudaMemcpy2DToArray(a, 0, 0, texels.data(), W * sizeof(uchar4), W * sizeof(uchar4), H,
                              cudaMemcpyHostToDevice));
    cudaResourceDesc r = array_resource(a);
    cudaTextureDesc td = texture_desc(cudaAddressModeWrap, cudaFilterModePoint, cudaReadModeNormalizedFloat, 1);
    cudaTextureObject_t wrap, mirror, border;
    CHECK(cudaCreateTextureObject(&wrap, &r, &td, nullptr));
    td = texture_desc(cudaAddressModeMirror, cudaFilterModePoint, cudaReadModeNormalizedFloat, 1);
    CHECK(cudaCreateTextureObject(&mirror, &r, &td, nullptr));
    td = texture_desc(cudaAddressModeBorder, cudaFilterModePoint, cudaReadModeNormalizedFloat, 1);
    td.borderColor[0] = 0.25f;
    td.borderColor[3] = 0.75f;
    CHECK(cudaCreateTextureObject(&border, &r, &td, nullptr));
    float4* d4 = reinterpret_cast<float4*>(d_out);
    fetch_normalized<<<1, dim3(W, H)>>>(wrap, mirror, border, d4, d4 + 256, d4 + 512);
    CHECK(cudaMemcpy(got.data(), d_out, 4096 * sizeof(float), cudaMemcpyDeviceToHost));
    std::vector<float> want(W * H * 4), edge(W * H * 4);
    for (int i = 0; i < W * H; ++i) {
      want[4 * i] = texels[i].x / 255.0f;
      want[4 * i + 1] = texels[i].y / 255.0f;
      want[4 * i + 2] = texels[i].z / 255.0f;
      want[4 * i + 3] = texels[i].w / 255.0f;
      edge[4 * i] = 0.25f;
      edge[4 * i + 3] = 0.75f;
    }
    std::printf("wrap_good=%d of %d mirror_good=%d of %d border_good=%d of %d\n",
                good(got.data(), want.data(), W * H * 4), W * H * 4,
                good(got.data() + 1024, want.data(), W * H * 4), W * H * 4,
                good(got.data() + 2048, edge.data(), W * H * 4), W * H * 4);

    // 4. The same bytes as elements, and an int array.
    td = texture_desc(cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, 0);
    cudaTextureObject_t bytes, ints;
    CHECK(cudaCreateTextureObject(&bytes, &r, &td, nullptr));
    cudaChannelFormatDesc ci = cudaCreateChannelDesc<int>();
    cudaArray_t ai;
    CHECK(cudaMallocArray(&ai, &ci, W, H));
    std::vector<int> hi(W * H);
    for (int i = 0; i < W * H; ++i) hi[i] = -1000 * i - 3;
    CHECK(cudaMemcpy2DToArray(ai, 0, 0, hi.data(), W * 4, W * 4, H, cudaMemcpyHostToDevice));
    cudaResourceDesc ri = array_resource(ai);
    CHECK(cudaCreateTextureObject(&ints, &ri, &td, nullptr));
    int* d_ints = reinterpret_cast<int*>(d_out);
    uchar4* d_raw = reinterpret_cast<uchar4*>(d_out + 1024);
    fetch_integers<<<1, dim3(W, H)>>>(ints, bytes, d_ints, d_raw);
    std::vector<int> gi(W * H);
    std::vector<uchar4> gr(W * H);
    CHECK(cudaMemcpy(gi.data(), d_ints, W * H * 4, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(gr.data(), d_raw, W * H * 4, cudaMemcpyDeviceToHost));
    int ig = 0, rg = 0;
    for (int i = 0; i < W * H; ++i) {
      ig += gi[i] == hi[i];
      rg += std::memcmp(&gr[i], &texels[i], 4) == 0;
    }
    std::printf("int_good=%d of %d element_good=%d of %d\n", ig, W * H, rg, W * H);

    // Refused: linear filtering of integers, sRGB, a surface over an array without
    // surface load/store.
    td = texture_desc(cudaAddressModeClamp, cudaFilterModeLinear, cudaReadModeElementType, 0);
    cudaTextureObject_t refused;
    int linear_ints = cudaCreateTextureObject(&refused, &ri, &td, nullptr);
    cudaGetLastError();
    td = texture_desc(cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeNormalizedFloat, 0);
    td.sRGB = 1;
    int srgb = cudaCreateTextureObject(&refused, &r, &td, nullptr);
    cudaGetLastError();
    cudaSurfaceObject_t no_surface;
    int plain_surface = cudaCreateSurfaceObject(&no_surface, &r);
    cudaGetLastError();
    std::printf("refused=%d,%d,%d\n", linear_ints, srgb, plain_surface);
    for (cudaTextureObject_t t : {wrap, mirror, border, bytes, ints}) CHECK(cudaDestroyTextureObject(t));
    CHECK(cudaFreeArray(a));
    CHECK(cudaFreeArray(ai));
  }

  // 5. A 3-D array: point and trilinear; 6. layered; 7. cubemap.
  if (!flat) {
    cudaChannelFormatDesc c = cudaCreateChannelDesc<float>();
    std::vector<float> vol(W * H * D);
    for (int i = 0; i < W * H * D; ++i) vol[i] = 0.5f * i;
    cudaArray_t a;
    CHECK(cudaMalloc3DArray(&a, &c, make_cudaExtent(W, H, D)));
    cudaMemcpy3DParms p;
    std::memset(&p, 0, sizeof p);
    p.srcPtr = make_cudaPitchedPtr(vol.data(), W * sizeof(float), W, H);
    p.dstArray = a;
    p.extent = make_cudaExtent(W, H, D);
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));
    cudaResourceDesc r = array_resource(a);
    cudaTextureDesc td = texture_desc(cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, 0);
    cudaTextureObject_t point, linear;
    CHECK(cudaCreateTextureObject(&point, &r, &td, nullptr));
    td.filterMode = cudaFilterModeLinear;
    CHECK(cudaCreateTextureObject(&linear, &r, &td, nullptr));
    fetch_3d<<<1, dim3(W, H, D)>>>(point, linear, d_out, d_out + 1024);
    CHECK(cudaMemcpy(got.data(), d_out, 4096 * sizeof(float), cudaMemcpyDeviceToHost));
    auto at = [&](int x, int y, int z) {
      x = x < W ? x : W - 1;
      y = y < H ? y : H - 1;
      z = z < D ? z : D - 1;
      return vol[(z * H + y) * W + x];
    };
    std::vector<float> mid(W * H * D);
    for (int z = 0; z < D; ++z)
      for (int y = 0; y < H; ++y)
        for (int x = 0; x < W; ++x) {
          float s = 0;
          for (int k = 0; k < 8; ++k) s += at(x + (k & 1), y + ((k >> 1) & 1), z + ((k >> 2) & 1));
          mid[(z * H + y) * W + x] = s / 8;
        }
    std::printf("volume_good=%d of %d trilinear_good=%d of %d\n", good(got.data(), vol.data(), W * H * D), W * H * D,
                good(got.data() + 1024, mid.data(), W * H * D, 1e-4f), W * H * D);
    CHECK(cudaDestroyTextureObject(point));
    CHECK(cudaDestroyTextureObject(linear));
    CHECK(cudaFreeArray(a));

    cudaArray_t layered;
    CHECK(cudaMalloc3DArray(&layered, &c, make_cudaExtent(W, H, LAYERS), cudaArrayLayered));
    std::vector<float> layers(W * H * LAYERS);
    for (int i = 0; i < W * H * LAYERS; ++i) layers[i] = 3.0f * i - 7;
    p.srcPtr = make_cudaPitchedPtr(layers.data(), W * sizeof(float), W, H);
    p.dstArray = layered;
    p.extent = make_cudaExtent(W, H, LAYERS);
    CHECK(cudaMemcpy3D(&p));
    r = array_resource(layered);
    td = texture_desc(cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, 0);
    cudaTextureObject_t tl;
    CHECK(cudaCreateTextureObject(&tl, &r, &td, nullptr));
    fetch_layered<<<1, dim3(W, H, LAYERS)>>>(tl, d_out);
    CHECK(cudaMemcpy(got.data(), d_out, W * H * LAYERS * sizeof(float), cudaMemcpyDeviceToHost));
    std::printf("layered_good=%d of %d\n", good(got.data(), layers.data(), W * H * LAYERS), W * H * LAYERS);
    CHECK(cudaDestroyTextureObject(tl));
    CHECK(cudaFreeArray(layered));

    cudaArray_t cube;
    CHECK(cudaMalloc3DArray(&cube, &c, make_cudaExtent(CUBE, CUBE, 6), cudaArrayCubemap));
    std::vector<float> faces(CUBE * CUBE * 6);
    for (int f = 0; f < 6; ++f)
      for (int y = 0; y < CUBE; ++y)
        for (int x = 0; x < CUBE; ++x) faces[(f * CUBE + y) * CUBE + x] = 100.0f * f + 10 * y + x;
    p.srcPtr = make_cudaPitchedPtr(faces.data(), CUBE * sizeof(float), CUBE, CUBE);
    p.dstArray = cube;
    p.extent = make_cudaExtent(CUBE, CUBE, 6);
    CHECK(cudaMemcpy3D(&p));
    r = array_resource(cube);
    td = texture_desc(cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, 1);
    cudaTextureObject_t tc;
    CHECK(cudaCreateTextureObject(&tc, &r, &td, nullptr));
    fetch_cube<<<1, 6>>>(tc, d_out);
    CHECK(cudaMemcpy(got.data(), d_out, 6 * sizeof(float), cudaMemcpyDeviceToHost));
    // A major axis' direction hits the center of its face: texel (2, 2) of a 4 x 4 face.
    std::vector<float> centers(6);
    for (int f = 0; f < 6; ++f) centers[f] = 100.0f * f + 22;
    std::printf("cube_good=%d of 6\n", good(got.data(), centers.data(), 6));
    CHECK(cudaDestroyTextureObject(tc));
    CHECK(cudaFreeArray(cube));
  }

  // 8. tex2Dgather on a 2-D array.
  {
    cudaChannelFormatDesc c = cudaCreateChannelDesc<float>();
    cudaTextureDesc td = texture_desc(cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, 0);
    cudaArray_t plain;
    CHECK(cudaMallocArray(&plain, &c, W, H));
    CHECK(cudaMemcpy2DToArray(plain, 0, 0, plane.data(), W * 4, W * 4, H, cudaMemcpyHostToDevice));
    cudaResourceDesc r = array_resource(plain);
    cudaTextureObject_t tg;
    CHECK(cudaCreateTextureObject(&tg, &r, &td, nullptr));
    float4* d4 = reinterpret_cast<float4*>(d_out);
    gather<<<1, dim3(W, H)>>>(tg, d4);
    CHECK(cudaMemcpy(got.data(), d_out, W * H * 16, cudaMemcpyDeviceToHost));
    auto pl = [&](int x, int y) { return plane[(y < H ? y : H - 1) * W + (x < W ? x : W - 1)]; };
    std::vector<float> four(W * H * 4);
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        float* g = &four[4 * (y * W + x)];
        g[0] = pl(x, y + 1);
        g[1] = pl(x + 1, y + 1);
        g[2] = pl(x + 1, y);
        g[3] = pl(x, y);
      }
    std::printf("gather_good=%d of %d\n", good(got.data(), four.data(), W * H * 4), W * H * 4);
    CHECK(cudaDestroyTextureObject(tg));
    CHECK(cudaFreeArray(plain));
  }

  // 10. A grid of blocks over a 64 x 64 pitch-2D texture, normalized coordinates.
  {
    const int side = 64;
    std::vector<float> big(side * side);
    for (int i = 0; i < side * side; ++i) big[i] = 0.25f * i - 100;
    float* d;
    size_t pitch;
    CHECK(cudaMallocPitch(&d, &pitch, side * sizeof(float), side));
    CHECK(cudaMemcpy2D(d, pitch, big.data(), side * 4, side * 4, side, cudaMemcpyHostToDevice));
    cudaResourceDesc r = pitch2d_resource(d, pitch, side, side);
    cudaTextureDesc td = texture_desc(cudaAddressModeWrap, cudaFilterModePoint, cudaReadModeElementType, 1);
    cudaTextureObject_t t;
    CHECK(cudaCreateTextureObject(&t, &r, &td, nullptr));
    float* d_big;
    CHECK(cudaMalloc(&d_big, side * side * sizeof(float)));
    fetch_grid<<<side * side / 128, 128>>>(t, d_big, side);
    std::vector<float> back(side * side);
    CHECK(cudaMemcpy(back.data(), d_big, side * side * sizeof(float), cudaMemcpyDeviceToHost));
    std::printf("grid_good=%d of %d\n", good(back.data(), big.data(), side * side), side * side);
    CHECK(cudaDestroyTextureObject(t));
    CHECK(cudaFree(d));
    CHECK(cudaFree(d_big));
  }

  if (flat) {
    // A 3-D array's texture and a surface: what the backend answers.
    cudaChannelFormatDesc c = cudaCreateChannelDesc<float>();
    cudaArray_t a;
    CHECK(cudaMalloc3DArray(&a, &c, make_cudaExtent(W, H, D), cudaArraySurfaceLoadStore));
    cudaResourceDesc r = array_resource(a);
    cudaTextureDesc td = texture_desc(cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, 0);
    cudaTextureObject_t t;
    cudaSurfaceObject_t s;
    const int volume = cudaCreateTextureObject(&t, &r, &td, nullptr);
    cudaGetLastError();
    const int surface = cudaCreateSurfaceObject(&s, &r);
    cudaGetLastError();
    // a 2-D array of 7 floats a row: 28-byte rows
    cudaArray_t narrow;
    CHECK(cudaMallocArray(&narrow, &c, 7, 4));
    r = array_resource(narrow);
    const int narrow_rows = cudaCreateTextureObject(&t, &r, &td, nullptr);
    cudaGetLastError();
    if (narrow_rows == cudaSuccess) CHECK(cudaDestroyTextureObject(t));
    std::printf("array_forms=%d,%d narrow_rows=%d\n", volume, surface, narrow_rows);
    CHECK(cudaFreeArray(a));
    CHECK(cudaFreeArray(narrow));
  }

  // 9. Surfaces.
  if (!flat) {
    cudaChannelFormatDesc ci = cudaCreateChannelDesc<int>();
    cudaArray_t a;
    CHECK(cudaMallocArray(&a, &ci, W, H, cudaArraySurfaceLoadStore));
    std::vector<int> hi(W * H);
    for (int i = 0; i < W * H; ++i) hi[i] = i;
    CHECK(cudaMemcpy2DToArray(a, 0, 0, hi.data(), W * 4, W * 4, H, cudaMemcpyHostToDevice));
    cudaChannelFormatDesc c4 = cudaCreateChannelDesc<float4>();
    cudaArray_t a3;
    CHECK(cudaMalloc3DArray(&a3, &c4, make_cudaExtent(W, H, D), cudaArraySurfaceLoadStore));
    std::vector<float4> v3(W * H * D, make_float4(0, 0, 0, 0));
    for (int i = 0; i < W * H; ++i) v3[i] = make_float4(i, -i, 2 * i, 1);
    cudaMemcpy3DParms p;
    std::memset(&p, 0, sizeof p);
    p.srcPtr = make_cudaPitchedPtr(v3.data(), W * sizeof(float4), W, H);
    p.dstArray = a3;
    p.extent = make_cudaExtent(W, H, D);
    p.kind = cudaMemcpyHostToDevice;
    CHECK(cudaMemcpy3D(&p));
    cudaChannelFormatDesc cf = cudaCreateChannelDesc<float>();
    cudaArray_t al;
    CHECK(cudaMalloc3DArray(&al, &cf, make_cudaExtent(W, H, LAYERS), cudaArrayLayered | cudaArraySurfaceLoadStore));
    cudaSurfaceObject_t s, s3, sl;
    cudaResourceDesc r = array_resource(a);
    CHECK(cudaCreateSurfaceObject(&s, &r));
    r = array_resource(a3);
    CHECK(cudaCreateSurfaceObject(&s3, &r));
    r = array_resource(al);
    CHECK(cudaCreateSurfaceObject(&sl, &r));
    int* outside;
    CHECK(cudaMalloc(&outside, 8));
    CHECK(cudaMemset(outside, 0xff, 8));
    surfaces<<<1, dim3(W, H)>>>(s, s3, sl, outside);
    CHECK(cudaDeviceSynchronize());
    std::vector<int> back(W * H);
    CHECK(cudaMemcpy2DFromArray(back.data(), W * 4, a, 0, 0, W * 4, H, cudaMemcpyDeviceToHost));
    int sg = 0;
    for (int i = 0; i < W * H; ++i) sg += back[i] == (i == W + W - 1 ? -7 : i + 1000);
    int hout[2];
    CHECK(cudaMemcpy(hout, outside, 8, cudaMemcpyDeviceToHost));
    p.srcPtr = make_cudaPitchedPtr(nullptr, 0, 0, 0);
    p.srcArray = a3;
    p.dstArray = nullptr;
    p.dstPtr = make_cudaPitchedPtr(v3.data(), W * sizeof(float4), W, H);
    p.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&p));
    int vg = 0;
    for (int z = 0; z < D; ++z)
      for (int i = 0; i < W * H; ++i) {
        const float4 f = v3[z * W * H + i];
        vg += f.x == i + z && f.y == -i && f.z == 2 * i && f.w == 1;
      }
    std::vector<float> lb(W * H * LAYERS);
    std::memset(&p, 0, sizeof p);
    p.srcArray = al;
    p.dstPtr = make_cudaPitchedPtr(lb.data(), W * sizeof(float), W, H);
    p.extent = make_cudaExtent(W, H, LAYERS);
    p.kind = cudaMemcpyDeviceToHost;
    CHECK(cudaMemcpy3D(&p));
    int lg = 0;
    for (int layer = 0; layer < LAYERS; ++layer)
      for (int y = 0; y < H; ++y)
        for (int x = 0; x < W; ++x) lg += lb[(layer * H + y) * W + x] == layer * 10.0f + y;
    std::printf("surface_good=%d of %d outside=%d,%d surface3d_good=%d of %d surface_layered_good=%d of %d\n", sg,
                W * H, hout[0], hout[1], vg, W * H * D, lg, W * H * LAYERS);
    for (cudaSurfaceObject_t o : {s, s3, sl}) CHECK(cudaDestroySurfaceObject(o));
    CHECK(cudaFreeArray(a));
    CHECK(cudaFreeArray(a3));
    CHECK(cudaFreeArray(al));
    CHECK(cudaFree(outside));
  }

  // A texture over memory this job does not own (plain host memory).
  {
    std::vector<float> host(256);
    cudaResourceDesc r = linear_resource(host.data(), 1024);
    cudaTextureDesc td = texture_desc(cudaAddressModeClamp, cudaFilterModePoint, cudaReadModeElementType, 0);
    cudaTextureObject_t t;
    std::printf("foreign_memory=%d\n", static_cast<int>(cudaCreateTextureObject(&t, &r, &td, nullptr)));
    cudaGetLastError();
  }
  CHECK(cudaFree(d_out));
  std::printf("done=1\n");
  return 0;
}
