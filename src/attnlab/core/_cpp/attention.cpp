// attnlab's CPU attention kernel: exact softmax attention that writes its weights once.
//
// Built on first use by attnlab.core._kernel (torch.utils.cpp_extension, one translation
// unit, -O3; the vector width is chosen from the CPU torch reports, see _kernel.py) and
// registered as torch.ops.attnlab_kernel.{forward, backward}.
//
// Layout: q (outer, H_kv, G, Lq, d), k (outer, H_kv, Lk, d), v (outer, H_kv, Lk, dv), with
// any strides but 1 along the last dim (broadcast dims have stride 0: nothing is copied);
// G query heads share one key/value head. The mask, if any, is (outer, H_kv, G, Lq, Lk),
// likewise strided: bool (true = may attend) or of q's dtype (added; -inf blocks even a
// NaN score). Weights and logsumexp are contiguous (outer, H_kv, G, Lq, ·).
//
// Forward, one task per (query head, block of rows), in parallel (for_each_task):
//   S = scale · Q_t Kᵀ            one GEMM into a per-thread buffer (rows x c, in cache);
//                                 c = the keys the tile's last row may see under causal
//   mask, causal                  -inf where blocked
//   m = rowmax S, E = exp(S − m)  vectorised (at::vec), l = Σ E
//   weights = E / l               written once, straight to the output (streaming stores)
//   out = (E V) / l               one GEMM while E is still in cache
//   lse = m + log l
// A row with no allowed key gives weights 0, out 0, lse -inf; a row whose scores hold NaN
// (or +inf) gives NaN, as softmax does. Values that are non-finite are passed zeroed
// (v_clean) plus the raw v and a per-key flag: a row that gives such a value weight > 0
// gets the non-finite result, every other row stays exact.
//
// Backward through the saved weights P (same tiles; dK, dV accumulate per thread):
//   dV += Pᵀ dO,  dP = dO Vᵀ (+ dW),  dS = P ∘ (dP − rowsum(P ∘ dP) + dlse),
//   dQ = scale · dS K,  dK += scale · dSᵀ Q

// Only the operators used are included (not ATen/ATen.h, every operator's declaration):
// the first build on a machine compiles in about 9 s instead of 13 (a third less to parse).
#define TORCH_ASSERT_ONLY_METHOD_OPERATORS
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/cpu/vec/vec.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mutex>
#include <vector>

#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
#include <immintrin.h>
#endif

extern "C" {
void sgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k,
            const float* alpha, const float* a, const int* lda, const float* b,
            const int* ldb, const float* beta, float* c, const int* ldc);
void dgemm_(const char* ta, const char* tb, const int* m, const int* n, const int* k,
            const double* alpha, const double* a, const int* lda, const double* b,
            const int* ldb, const double* beta, double* c, const int* ldc);
}

namespace {

using at::vec::Vectorized;

// Row-major C (M x N) = alpha · op(A) (M x K) · op(B) (K x N) + beta · C. The column-major
// BLAS sees every row-major matrix transposed, so it computes Cᵀ = op(B)ᵀ op(A)ᵀ.
template <typename T>
inline void gemm_rm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A,
                    int64_t lda, const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
    return;
  }
  const char cta = tb ? 'T' : 'N', ctb = ta ? 'T' : 'N';
  const int m = (int)N, n = (int)M, k = (int)K, la = (int)ldb, lb = (int)lda, lc = (int)ldc;
  if constexpr (std::is_same_v<T, float>) {
    sgemm_(&cta, &ctb, &m, &n, &k, &alpha, B, &la, A, &lb, &beta, C, &lc);
  } else {
    dgemm_(&cta, &ctb, &m, &n, &k, &alpha, B, &la, A, &lb, &beta, C, &lc);
  }
}

constexpr float kNegInfF = -std::numeric_limits<float>::infinity();

// max over s[0:L) with NaN propagation
template <typename T>
inline T row_max(const T* s, int64_t L) {
  using V = Vectorized<T>;
  T m = -std::numeric_limits<T>::infinity();
  bool nan = false;
  int64_t j = 0;
  if constexpr (std::is_same_v<T, float>) {
    V vm(m);
    for (; j + V::size() <= L; j += V::size()) vm = at::vec::maximum(vm, V::loadu(s + j));
    T lanes[V::size()];
    vm.store(lanes);
    for (int64_t i = 0; i < V::size(); ++i) {
      if (std::isnan(lanes[i])) nan = true;
      else if (lanes[i] > m) m = lanes[i];
    }
  }
  for (; j < L; ++j) {
    if (std::isnan(s[j])) nan = true;
    else if (s[j] > m) m = s[j];
  }
  return nan ? std::numeric_limits<T>::quiet_NaN() : m;
}

// s[0:L) <- exp(s - m); returns the sum
template <typename T>
inline T row_exp(T* s, int64_t L, T m) {
  int64_t j = 0;
  T sum = 0;
  if constexpr (std::is_same_v<T, float>) {
    using V = Vectorized<float>;
    V vm(m), acc(0.f);
    for (; j + V::size() <= L; j += V::size()) {
      V e = (V::loadu(s + j) - vm).exp();  // Sleef, within 1 ulp (exp_u20 is 20 ulp)
      e.store(s + j);
      acc = acc + e;
    }
    float lanes[V::size()];
    acc.store(lanes);
    for (int64_t i = 0; i < V::size(); ++i) sum += lanes[i];
  }
  for (; j < L; ++j) {
    s[j] = std::exp(s[j] - m);
    sum += s[j];
  }
  return sum;
}

// s[0:L) *= scale (each product rounded to float, as a scalar multiply rounds it); returns
// whether any product is NaN
inline bool scale_has_nan(float* s, int64_t L, float scale) {
  using V = Vectorized<float>;
  int64_t j = 0;
  const V vs(scale);
  V bad(0.f);
  for (; j + V::size() <= L; j += V::size()) {
    const V x = V::loadu(s + j) * vs;
    x.store(s + j);
    bad = bad | x.isnan();
  }
  bool nan = false;
  {
    float lanes[V::size()];
    bad.store(lanes);
    for (int64_t i = 0; i < V::size(); ++i) nan |= lanes[i] != 0.f;
  }
  for (; j < L; ++j) {
    s[j] *= scale;
    nan |= std::isnan(s[j]);
  }
  return nan;
}

// w[0:L) = e[0:L) * inv, w[L:n) = 0; streaming stores when aligned (the weights are written
// once and read by nobody here: no reason to pull their lines into the cache)
template <typename T>
inline void write_row(T* w, const T* e, int64_t L, int64_t n, T inv, bool zeroed) {
  if (zeroed) n = L;  // the tail is already 0
  int64_t j = 0;
  if constexpr (std::is_same_v<T, float>) {
    using V = Vectorized<float>;
    V vi(inv);
#if defined(CPU_CAPABILITY_AVX512)
    if ((reinterpret_cast<uintptr_t>(w) & 63) == 0) {
      for (; j + 16 <= L; j += 16) _mm512_stream_ps(w + j, _mm512_mul_ps(_mm512_loadu_ps(e + j), vi));
      for (; j < L; ++j) w[j] = e[j] * inv;
      for (; j < n && (reinterpret_cast<uintptr_t>(w + j) & 63); ++j) w[j] = 0.f;
      const __m512 z = _mm512_setzero_ps();
      for (; j + 16 <= n; j += 16) _mm512_stream_ps(w + j, z);
      for (; j < n; ++j) w[j] = 0.f;
      return;
    }
#elif defined(CPU_CAPABILITY_AVX2)
    if ((reinterpret_cast<uintptr_t>(w) & 31) == 0) {
      for (; j + 8 <= L; j += 8) _mm256_stream_ps(w + j, _mm256_mul_ps(_mm256_loadu_ps(e + j), vi));
      for (; j < L; ++j) w[j] = e[j] * inv;
      for (; j < n && (reinterpret_cast<uintptr_t>(w + j) & 31); ++j) w[j] = 0.f;
      const __m256 z = _mm256_setzero_ps();
      for (; j + 8 <= n; j += 8) _mm256_stream_ps(w + j, z);
      for (; j < n; ++j) w[j] = 0.f;
      return;
    }
#endif
    for (; j + V::size() <= L; j += V::size()) (V::loadu(e + j) * vi).store(w + j);
  }
  for (; j < L; ++j) w[j] = e[j] * inv;
  for (; j < n; ++j) w[j] = T(0);
}

inline void fence() {
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
  _mm_sfence();
#endif
}

// Large outputs (the weights) live in anonymous memory advised onto 2 MiB pages: the
// weights are the one N²-sized write, and 4 KiB page faults would cost as much as writing
// them. Fresh pages come zeroed by the OS, which is itself a full pass over the memory (at
// N = 4096 as long as the rest of the kernel), so the most recently freed block is kept
// (one block; marked MADV_FREE, so the OS may take its pages back under memory pressure)
// and reused by the next output of about its size. release_memory() unmaps it.
struct Block {
  void* base = nullptr;
  size_t total = 0;  // the mapping
  void* start = nullptr;
  size_t cap = 0;  // the 2 MiB-aligned usable part
};
std::mutex g_block_mu;
Block g_block;

constexpr size_t kHuge = size_t(2) << 20;

void unmap(const Block& b) {
  if (b.base) munmap(b.base, b.total);
}

void keep_or_unmap(const Block& b) {
  Block old;
  {
    std::lock_guard<std::mutex> lock(g_block_mu);
    old = g_block;
    madvise(b.start, b.cap, MADV_FREE);
    g_block = b;
  }
  unmap(old);
}

int64_t release_memory() {
  Block old;
  {
    std::lock_guard<std::mutex> lock(g_block_mu);
    old = g_block;
    g_block = Block();
  }
  unmap(old);
  return static_cast<int64_t>(old.total);
}

// *zeroed: the memory is known to hold zeros (fresh from the OS)
at::Tensor big_empty(at::IntArrayRef sizes, const at::TensorOptions& options, bool* zeroed) {
  *zeroed = false;
  int64_t numel = 1;
  for (auto s : sizes) numel *= s;
  const size_t bytes = static_cast<size_t>(numel) * options.dtype().itemsize();
  if (bytes < 4 * kHuge) return at::empty(sizes, options);
  Block b, stale;
  {
    std::lock_guard<std::mutex> lock(g_block_mu);
    if (g_block.base && g_block.cap >= bytes && g_block.cap <= 2 * bytes + kHuge) {
      b = g_block;  // reuse: already mapped, contents arbitrary
      g_block = Block();
    } else if (g_block.base) {
      stale = g_block;  // does not fit: give it back before mapping more
      g_block = Block();
    }
  }
  unmap(stale);
  if (!b.base) {
    const size_t cap = (bytes + kHuge - 1) & ~(kHuge - 1);
    const size_t total = cap + kHuge;
    void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return at::empty(sizes, options);
    const uintptr_t start = (reinterpret_cast<uintptr_t>(base) + kHuge - 1) & ~(kHuge - 1);
    madvise(reinterpret_cast<void*>(start), cap, MADV_HUGEPAGE);
    b = Block{base, total, reinterpret_cast<void*>(start), cap};
    *zeroed = true;
  }
  return at::from_blob(b.start, sizes, [b](void*) { keep_or_unmap(b); }, options);
}

// Tasks go head by head (a thread's consecutive tiles reuse K and V from cache); within a
// head the row blocks go 0, T-1, 1, T-2, ... so that every contiguous range of tasks (one
// per thread) mixes short causal rows with long ones
inline int64_t zigzag(int64_t t, int64_t n) { return (t & 1) ? n - 1 - t / 2 : t / 2; }

// Runs tasks [0, tasks) on torch's intra-op threads, each thread taking the next task when
// it is done with its own: on a shared machine a thread the OS holds back delays the task it
// holds, not a fixed share of them (at::parallel_for splits a range once, in equal parts).
// per_thread(take) runs once on each thread (its buffers set up there); take() gives the
// next task, or -1 when none is left.
template <typename F>
void for_each_task(int64_t tasks, const F& per_thread) {
  if (tasks <= 0) return;
  std::atomic<int64_t> next{0};
  auto take = [&]() -> int64_t {
    const int64_t t = next.fetch_add(1, std::memory_order_relaxed);
    return t < tasks ? t : -1;
  };
  const int64_t workers = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), tasks));
  at::parallel_for(0, workers, 1, [&](int64_t, int64_t) { per_thread(take); });
}

// Strided views: element (o, h, [g,] r, x) of a tensor lives at
// base + o·s[0] + h·s[1] + [g·s[2] +] r·s[-2] + x (unit stride along the last dim).
template <typename T>
struct View {
  T* p = nullptr;
  int64_t s[4] = {0, 0, 0, 0};  // outer, H_kv, (G,) rows
  int nd = 0;                   // 4: (outer, H_kv, G, rows, x); 3: (outer, H_kv, rows, x)
  View() = default;
  View(const at::Tensor& t) : p(const_cast<T*>(t.data_ptr<T>())), nd(int(t.dim()) - 1) {
    for (int i = 0; i < nd; ++i) s[i] = t.stride(i);
  }
  int64_t ld() const { return s[nd - 1]; }
  // (outer o, key head hk, group g) -> the first row
  T* at(int64_t o, int64_t hk, int64_t g = 0) const {
    return p + o * s[0] + hk * s[1] + (nd == 4 ? g * s[2] : 0);
  }
};

struct Geometry {
  int64_t outer, H_kv, G, Lq, Lk, d, dv, rows, blocks, offset;
  bool causal;
  int64_t heads() const { return outer * H_kv * G; }
  // keys row r may see: [0, visible(r))
  int64_t visible(int64_t r) const {
    if (!causal) return Lk;
    return std::max<int64_t>(0, std::min<int64_t>(Lk, r + offset + 1));
  }
};

Geometry geometry(const at::Tensor& q, const at::Tensor& v, bool causal, int64_t tile_rows) {
  Geometry g;
  g.outer = q.size(0);
  g.H_kv = q.size(1);
  g.G = q.size(2);
  g.Lq = q.size(3);
  g.d = q.size(4);
  g.Lk = v.size(2);
  g.dv = v.size(3);
  g.causal = causal;
  g.offset = g.Lk - g.Lq;
  int64_t rows = tile_rows;
  if (rows <= 0) {  // about 1 MiB of scores per tile: in L2 through both GEMMs, and tall
                    // enough that the GEMM's packing of K is spread over many rows
    rows = (int64_t(1) << 20) / (std::max<int64_t>(g.Lk, 1) * q.element_size());
    rows = std::clamp<int64_t>(rows, 16, 256);
  }
  g.rows = std::max<int64_t>(1, std::min(rows, std::max<int64_t>(g.Lq, 1)));
  g.blocks = (g.Lq + g.rows - 1) / g.rows;
  return g;
}

void check_unit(const at::Tensor& t, const char* name, int64_t dim) {
  TORCH_CHECK(t.dim() == dim, "attnlab kernel: ", name, " must have ", dim, " dims");
  TORCH_CHECK(t.size(-1) <= 1 || t.stride(-1) == 1, "attnlab kernel: ", name,
              " needs unit stride along its last dim");
}

void check_inputs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  check_unit(q, "q", 5);
  check_unit(k, "k", 4);
  check_unit(v, "v", 4);
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
              "attnlab kernel: one dtype");
  TORCH_CHECK(k.size(0) == q.size(0) && k.size(1) == q.size(1) && v.size(0) == q.size(0) &&
                  v.size(1) == q.size(1) && k.size(3) == q.size(4) && v.size(2) == k.size(2),
              "attnlab kernel: shapes do not match");
}

template <typename T>
void forward_impl(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const c10::optional<at::Tensor>& mask, const c10::optional<at::Tensor>& v_raw,
                  const c10::optional<at::Tensor>& bad_keys, const Geometry& g, double scale_d,
                  at::Tensor& out, at::Tensor& weights, at::Tensor& lse, bool want_lse,
                  bool zeroed) {
  const T scale = static_cast<T>(scale_d);
  const View<T> Q(q), K(k), V(v), O(out);
  T* wp = weights.data_ptr<T>();  // contiguous (heads, Lq, Lk)
  T* lp = want_lse ? lse.data_ptr<T>() : nullptr;  // contiguous (heads, Lq)
  const bool has_mask = mask.has_value();
  const bool bool_mask = has_mask && mask->scalar_type() == at::kBool;
  const char* mbase = has_mask ? static_cast<const char*>(mask->data_ptr()) : nullptr;
  int64_t ms[4] = {0, 0, 0, 0};
  if (has_mask)
    for (int i = 0; i < 4; ++i) ms[i] = mask->stride(i) * mask->element_size();
  const T* vraw = v_raw.has_value() ? v_raw->data_ptr<T>() : nullptr;  // contiguous
  const bool* badp = bad_keys.has_value() ? bad_keys->data_ptr<bool>() : nullptr;
  const int64_t heads = g.heads(), tasks = heads * g.blocks;

  for_each_task(tasks, [&](auto&& take) {
    std::vector<T> buf(static_cast<size_t>(g.rows * g.Lk + 16));
    std::vector<T> invs(static_cast<size_t>(g.rows));
    for (int64_t t; (t = take()) >= 0;) {
      const int64_t hq = t / g.blocks, blk = zigzag(t % g.blocks, g.blocks);
      const int64_t i = hq / g.G, gi = hq % g.G, o = i / g.H_kv, hk = i % g.H_kv;
      const int64_t r0 = blk * g.rows, r1 = std::min(g.Lq, r0 + g.rows), rows = r1 - r0;
      const int64_t c = g.visible(r1 - 1);  // keys some row of the tile may see
      const T* qt = Q.at(o, hk, gi) + r0 * Q.ld();
      const T* ki = K.at(o, hk);
      const T* vi = V.at(o, hk);
      T* ot = O.at(o, hk, gi) + r0 * O.ld();
      T* wt = wp + ((hq * g.Lq) + r0) * g.Lk;
      if (c == 0) {  // no row of this tile may see a key
        for (int64_t r = 0; r < rows; ++r) {
          std::fill(ot + r * O.ld(), ot + r * O.ld() + g.dv, T(0));
          if (!zeroed) std::fill(wt + r * g.Lk, wt + (r + 1) * g.Lk, T(0));
          if (lp) lp[hq * g.Lq + r0 + r] = -std::numeric_limits<T>::infinity();
        }
        continue;
      }
      T* s = buf.data();
      gemm_rm<T>(false, true, rows, c, g.d, scale, qt, Q.ld(), ki, K.ld(), T(0), s, c);
      for (int64_t r = 0; r < rows; ++r) {
        T* sr = s + r * c;
        const int64_t L = std::min(c, g.visible(r0 + r));
        if (has_mask) {
          const char* mrow = mbase + o * ms[0] + hk * ms[1] + gi * ms[2] + (r0 + r) * ms[3];
          if (bool_mask) {
            const bool* mb = reinterpret_cast<const bool*>(mrow);
            for (int64_t j = 0; j < L; ++j) sr[j] = mb[j] ? sr[j] : T(kNegInfF);
          } else {
            const T* mf = reinterpret_cast<const T*>(mrow);
            for (int64_t j = 0; j < L; ++j)
              sr[j] = std::isinf(mf[j]) && mf[j] < 0 ? mf[j] : sr[j] + mf[j];
          }
        }
        const T m = row_max<T>(sr, L);
        T inv, row_lse;
        if (m == -std::numeric_limits<T>::infinity()) {  // no allowed key
          std::fill(sr, sr + c, T(0));
          inv = T(0);
          row_lse = m;
        } else if (!std::isfinite(m)) {  // NaN or +inf among the scores: softmax gives NaN
          std::fill(sr, sr + L, std::numeric_limits<T>::quiet_NaN());
          std::fill(sr + L, sr + c, T(0));
          inv = T(1);
          row_lse = std::numeric_limits<T>::quiet_NaN();
        } else {
          const T sum = row_exp<T>(sr, L, m);
          std::fill(sr + L, sr + c, T(0));
          inv = T(1) / sum;
          row_lse = m + std::log(sum);
        }
        write_row<T>(wt + r * g.Lk, sr, L, g.Lk, inv, zeroed);
        if (lp) lp[hq * g.Lq + r0 + r] = row_lse;
        invs[r] = inv;
      }
      // out = (E V) / l
      gemm_rm<T>(false, false, rows, g.dv, c, T(1), s, c, vi, V.ld(), T(0), ot, O.ld());
      for (int64_t r = 0; r < rows; ++r) {
        const T inv = invs[r];
        T* orow = ot + r * O.ld();
        for (int64_t x = 0; x < g.dv; ++x) orow[x] *= inv;
        if (badp) {  // non-finite values this row gives weight > 0: their true product
          const int64_t L = std::min(c, g.visible(r0 + r));
          const T* sr = s + r * c;
          for (int64_t j = 0; j < L; ++j) {
            if (!badp[i * g.Lk + j] || !(sr[j] > T(0))) continue;
            const T p = sr[j] * inv;
            const T* vr = vraw + (i * g.Lk + j) * g.dv;
            for (int64_t x = 0; x < g.dv; ++x)
              if (!std::isfinite(vr[x])) orow[x] += p * vr[x];
          }
        }
      }
    }
    fence();
  });
}

// q (outer, H_kv, G, Lq, d), k (outer, H_kv, Lk, d), v (outer, H_kv, Lk, dv), strided.
// out has q's layout when heads_inner (rows outside heads, as a (B, L, H, d) projection
// split into heads has), else is contiguous; weights and lse are contiguous.
std::vector<at::Tensor> forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const c10::optional<at::Tensor>& mask,
                                const c10::optional<at::Tensor>& v_raw,
                                const c10::optional<at::Tensor>& bad_keys, bool causal,
                                double scale, bool want_lse, int64_t tile_rows,
                                bool heads_inner) {
  check_inputs(q, k, v);
  const Geometry g = geometry(q, v, causal, tile_rows);
  if (mask.has_value()) {
    TORCH_CHECK(mask->dim() == 5 && (mask->size(4) <= 1 || mask->stride(4) == 1) &&
                    mask->size(0) == g.outer && mask->size(1) == g.H_kv &&
                    mask->size(2) == g.G && mask->size(3) == g.Lq && mask->size(4) == g.Lk,
                "attnlab kernel: mask must be (outer, H_kv, G, Lq, Lk), unit stride along keys");
    TORCH_CHECK(mask->scalar_type() == at::kBool || mask->scalar_type() == q.scalar_type(),
                "attnlab kernel: mask must be bool or of q's dtype");
  }
  TORCH_CHECK(!v_raw.has_value() || (v_raw->is_contiguous() && bad_keys.has_value() &&
                                     bad_keys->is_contiguous()),
              "attnlab kernel: v_raw and bad_keys must be contiguous");
  at::Tensor out = heads_inner
                       ? at::empty({g.outer, g.Lq, g.H_kv, g.G, g.dv}, q.options())
                             .permute({0, 2, 3, 1, 4})
                       : at::empty({g.outer, g.H_kv, g.G, g.Lq, g.dv}, q.options());
  bool zeroed = false;
  at::Tensor weights = big_empty({g.outer, g.H_kv, g.G, g.Lq, g.Lk}, q.options(), &zeroed);
  at::Tensor lse = at::empty({g.outer, g.H_kv, g.G, want_lse ? g.Lq : 0}, q.options());
  if (g.Lq == 0 || g.heads() == 0) return {out, weights, lse};
  if (g.Lk == 0) {
    out.zero_();
    if (want_lse) lse.fill_(-std::numeric_limits<double>::infinity());
    return {out, weights, lse};
  }
  AT_DISPATCH_SWITCH(q.scalar_type(), "attnlab_kernel_forward",
                     AT_DISPATCH_CASE(at::kFloat, [&] {
                       forward_impl<float>(q, k, v, mask, v_raw, bad_keys, g, scale, out,
                                           weights, lse, want_lse, zeroed);
                     }) AT_DISPATCH_CASE(at::kDouble, [&] {
                       forward_impl<double>(q, k, v, mask, v_raw, bad_keys, g, scale, out,
                                            weights, lse, want_lse, zeroed);
                     }));
  return {out, weights, lse};
}

template <typename T>
inline T dot(const T* a, const T* b, int64_t n) {
  using V = Vectorized<T>;
  V acc(T(0));
  int64_t j = 0;
  for (; j + V::size() <= n; j += V::size())
    acc = at::vec::fmadd(V::loadu(a + j), V::loadu(b + j), acc);
  T lanes[V::size()];
  acc.store(lanes);
  T sum = 0;
  for (int64_t i = 0; i < V::size(); ++i) sum += lanes[i];
  for (; j < n; ++j) sum += a[j] * b[j];
  return sum;
}

template <typename T>
void backward_impl(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                   const at::Tensor& weights, const c10::optional<at::Tensor>& d_out,
                   const c10::optional<at::Tensor>& d_weights,
                   const c10::optional<at::Tensor>& d_lse, const Geometry& g, double scale_d,
                   at::Tensor& dq, at::Tensor& dk_parts, at::Tensor& dv_parts) {
  const T scale = static_cast<T>(scale_d);
  const View<T> Q(q), K(k), V(v);
  View<T> DO;
  if (d_out.has_value()) DO = View<T>(*d_out);
  const T* wp = weights.data_ptr<T>();
  const T* dwp = d_weights.has_value() ? d_weights->data_ptr<T>() : nullptr;  // contiguous
  const T* dlp = d_lse.has_value() ? d_lse->data_ptr<T>() : nullptr;          // contiguous
  T* dqp = dq.data_ptr<T>();  // contiguous (heads, Lq, d)
  T* dkp = dk_parts.data_ptr<T>();
  T* dvp = dv_parts.data_ptr<T>();
  const int64_t heads = g.heads(), tasks = heads * g.blocks;
  const int64_t slots = dk_parts.size(0);
  const int64_t n_kv = g.outer * g.H_kv;
  const int64_t dk_slot = n_kv * g.Lk * g.d, dv_slot = n_kv * g.Lk * g.dv;

  for_each_task(tasks, [&](auto&& take) {
    const int64_t slot = std::min<int64_t>(at::get_thread_num(), slots - 1);
    std::vector<T> buf(static_cast<size_t>(g.rows * g.Lk + 16));
    for (int64_t t; (t = take()) >= 0;) {
      const int64_t hq = t / g.blocks, blk = zigzag(t % g.blocks, g.blocks);
      const int64_t i = hq / g.G, gi = hq % g.G, o = i / g.H_kv, hk = i % g.H_kv;
      const int64_t r0 = blk * g.rows, r1 = std::min(g.Lq, r0 + g.rows), rows = r1 - r0;
      const int64_t c = g.visible(r1 - 1);
      T* dqt = dqp + (hq * g.Lq + r0) * g.d;
      if (c == 0) {
        std::fill(dqt, dqt + rows * g.d, T(0));
        continue;
      }
      const T* pt = wp + (hq * g.Lq + r0) * g.Lk;  // P (rows x c), ld Lk
      const T* qt = Q.at(o, hk, gi) + r0 * Q.ld();
      const T* ki = K.at(o, hk);
      const T* vi = V.at(o, hk);
      T* dki = dkp + slot * dk_slot + i * g.Lk * g.d;
      T* dvi = dvp + slot * dv_slot + i * g.Lk * g.dv;
      T* ds = buf.data();  // dP, then dS (rows x c)
      if (DO.p) {
        const T* dot_ = DO.at(o, hk, gi) + r0 * DO.ld();
        gemm_rm<T>(true, false, c, g.dv, rows, T(1), pt, g.Lk, dot_, DO.ld(), T(1), dvi, g.dv);
        gemm_rm<T>(false, true, rows, c, g.dv, T(1), dot_, DO.ld(), vi, V.ld(), T(0), ds, c);
      } else {
        std::fill(ds, ds + rows * c, T(0));
      }
      for (int64_t r = 0; r < rows; ++r) {
        T* dr = ds + r * c;
        const T* pr = pt + r * g.Lk;
        if (dwp) {
          const T* dw = dwp + (hq * g.Lq + r0 + r) * g.Lk;
          for (int64_t j = 0; j < c; ++j) dr[j] += dw[j];
        }
        const T sub = dot<T>(pr, dr, c) - (dlp ? dlp[hq * g.Lq + r0 + r] : T(0));
        for (int64_t j = 0; j < c; ++j) dr[j] = pr[j] * (dr[j] - sub);
      }
      gemm_rm<T>(false, false, rows, g.d, c, scale, ds, c, ki, K.ld(), T(0), dqt, g.d);
      gemm_rm<T>(true, false, c, g.d, rows, scale, ds, c, qt, Q.ld(), T(1), dki, g.d);
    }
  });
}

// Gradients of q (contiguous, q's shape), k and v (contiguous, (outer, H_kv, Lk, ·)).
std::vector<at::Tensor> backward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& weights,
                                 const c10::optional<at::Tensor>& d_out,
                                 const c10::optional<at::Tensor>& d_weights,
                                 const c10::optional<at::Tensor>& d_lse, bool causal,
                                 double scale, int64_t tile_rows) {
  check_inputs(q, k, v);
  TORCH_CHECK(weights.is_contiguous() && weights.scalar_type() == q.scalar_type(),
              "attnlab kernel: weights must be contiguous, of q's dtype");
  if (d_out.has_value()) check_unit(*d_out, "d_out", 5);
  for (const auto* t : {&d_out, &d_weights, &d_lse})
    TORCH_CHECK(!t->has_value() || (*t)->scalar_type() == q.scalar_type(),
                "attnlab kernel: gradients must be of q's dtype");
  TORCH_CHECK(!d_weights.has_value() || d_weights->is_contiguous(),
              "attnlab kernel: d_weights must be contiguous");
  TORCH_CHECK(!d_lse.has_value() || d_lse->is_contiguous(),
              "attnlab kernel: d_lse must be contiguous");
  const Geometry g = geometry(q, v, causal, tile_rows);
  const int64_t slots =
      std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), g.heads() * g.blocks));
  at::Tensor dq = at::empty({g.outer, g.H_kv, g.G, g.Lq, g.d}, q.options());
  at::Tensor dk_parts = at::zeros({slots, g.outer, g.H_kv, g.Lk, g.d}, q.options());
  at::Tensor dv_parts = at::zeros({slots, g.outer, g.H_kv, g.Lk, g.dv}, q.options());
  if (g.Lq > 0 && g.Lk > 0 && g.heads() > 0) {
    AT_DISPATCH_SWITCH(q.scalar_type(), "attnlab_kernel_backward",
                       AT_DISPATCH_CASE(at::kFloat, [&] {
                         backward_impl<float>(q, k, v, weights, d_out, d_weights, d_lse, g,
                                              scale, dq, dk_parts, dv_parts);
                       }) AT_DISPATCH_CASE(at::kDouble, [&] {
                         backward_impl<double>(q, k, v, weights, d_out, d_weights, d_lse, g,
                                               scale, dq, dk_parts, dv_parts);
                       }));
  } else {
    dq.zero_();
  }
  at::Tensor dk = slots == 1 ? dk_parts[0] : dk_parts.sum(0);
  at::Tensor dv = slots == 1 ? dv_parts[0] : dv_parts.sum(0);
  return {dq, dk, dv};
}

// Weights on demand from the logsumexp (attnlab.core.weights.shaped_weights, plain shapes):
// P = exp(scale · q kᵀ − lse) for rows at positions `rows` and keys [col0, col0 + C), 0
// where causal / window / key_mask hides a key or lse is -inf. q (h, R, d), k (h, C, d),
// lse (h, R) float32, contiguous. Tiles of rows x keys: one GEMM into a per-thread buffer,
// then mask, subtract and exp (vectorised) on the way out.
at::Tensor exp_rows(const at::Tensor& q, const at::Tensor& k, const at::Tensor& lse,
                    const at::Tensor& rows, int64_t col0, int64_t lq, int64_t lk, bool causal,
                    int64_t window, const c10::optional<at::Tensor>& key_mask, double scale_d) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && lse.dim() == 2 && rows.dim() == 1,
              "attnlab kernel: exp_rows takes q (h, R, d), k (h, C, d), lse (h, R), rows (R)");
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && lse.is_contiguous() &&
                  rows.is_contiguous(), "attnlab kernel: exp_rows needs contiguous inputs");
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat &&
                  lse.scalar_type() == at::kFloat && rows.scalar_type() == at::kLong,
              "attnlab kernel: exp_rows takes float32 q, k, lse and int64 rows");
  const int64_t h = q.size(0), R = q.size(1), d = q.size(2), C = k.size(1);
  TORCH_CHECK(k.size(0) == h && k.size(2) == d && lse.size(0) == h && lse.size(1) == R &&
                  rows.size(0) == R, "attnlab kernel: exp_rows shapes do not match");
  const bool* km = nullptr;
  if (key_mask.has_value()) {
    TORCH_CHECK(key_mask->scalar_type() == at::kBool && key_mask->is_contiguous() &&
                    key_mask->dim() == 1 && key_mask->size(0) == C,
                "attnlab kernel: key_mask must be a contiguous bool (C,)");
    km = key_mask->data_ptr<bool>();
  }
  bool zeroed = false;
  at::Tensor out = big_empty({h, R, C}, q.options(), &zeroed);
  if (h == 0 || R == 0 || C == 0) return out;
  const float scale = static_cast<float>(scale_d);
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* lp = lse.data_ptr<float>();
  const int64_t* rp = rows.data_ptr<int64_t>();
  float* op = out.data_ptr<float>();
  const int64_t tc = std::min<int64_t>(C, 4096);
  const int64_t tr = std::min<int64_t>(R, std::max<int64_t>(16, (int64_t(1) << 18) / tc));
  const int64_t nr = (R + tr - 1) / tr, nc = (C + tc - 1) / tc;
  for_each_task(h * nc * nr, [&](auto&& take) {
    std::vector<float> buf(static_cast<size_t>(tr * tc + 16));
    for (int64_t t; (t = take()) >= 0;) {  // head, then key block, then row block
      const int64_t hh = t / (nc * nr), cb = (t / nr) % nc, rb = t % nr;
      const int64_t r0 = rb * tr, rows_t = std::min(R, r0 + tr) - r0;
      const int64_t c0 = cb * tc, cols_t = std::min(C, c0 + tc) - c0;
      float* s = buf.data();
      // the keys of this tile each row may see: [a, b) (causal / window), none if a == b
      auto span = [&](int64_t r, int64_t* a, int64_t* b) {
        const int64_t pos = rp[r0 + r] + (lk - lq);
        int64_t lo = 0, hi = lk;  // visible absolute keys [lo, hi)
        if (causal) hi = pos + 1;
        if (window > 0) {
          lo = std::max(lo, pos - window + 1);
          hi = std::min(hi, pos + window);
        }
        *a = std::clamp<int64_t>(lo - col0 - c0, 0, cols_t);
        *b = std::clamp<int64_t>(hi - col0 - c0, *a, cols_t);
      };
      bool any = false;
      for (int64_t r = 0; r < rows_t && !any; ++r) {
        int64_t a, b;
        span(r, &a, &b);
        any = b > a;
      }
      if (!any) {  // every key of the tile hidden from every row: zeros, no GEMM
        for (int64_t r = 0; r < rows_t; ++r) {
          float* w = op + (hh * R + r0 + r) * C + c0;
          std::fill(w, w + cols_t, 0.f);
        }
        continue;
      }
      // q·k first, then the scale, rounded as torch's (q @ kᵀ) * scale rounds it: the
      // stored lse was computed that way, and exp(s − lse) is only as exact as the two agree
      gemm_rm<float>(false, true, rows_t, cols_t, d, 1.f, qp + (hh * R + r0) * d, d,
                     kp + (hh * C + c0) * d, d, 0.f, s, cols_t);
      for (int64_t r = 0; r < rows_t; ++r) {
        float* sr = s + r * cols_t;
        int64_t a, b;
        span(r, &a, &b);
        const float l = lp[hh * R + r0 + r];
        std::fill(sr, sr + a, 0.f);
        std::fill(sr + b, sr + cols_t, 0.f);
        if (l == -std::numeric_limits<float>::infinity()) {
          std::fill(sr + a, sr + b, 0.f);
        } else {
          // the scale (after q·k, rounded as torch's (q @ kᵀ) * scale) and the NaN check
          // in one vectorised pass
          const bool nan = scale_has_nan(sr + a, b - a, scale) || std::isnan(l);
          if (nan) {  // NaN stays NaN, as exp gives it
            for (int64_t j = a; j < b; ++j) sr[j] = std::exp(sr[j] - l);
          } else {
            row_exp<float>(sr + a, b - a, l);
          }
          if (km)
            for (int64_t j = a; j < b; ++j)
              if (!km[c0 + j]) sr[j] = 0.f;
        }
        write_row<float>(op + (hh * R + r0 + r) * C + c0, sr, cols_t, cols_t, 1.f, false);
      }
    }
    fence();
  });
  return out;
}

// The sums behind the head scores (attnlab.analysis.sums), straight from q, k and the
// logsumexp: no weight is written. For query heads `heads` of q (H, Lq, d) — head h reads
// key head h / (H / H_kv) of k (H_kv, Lk, d) — and the query rows [row0, row0 + rows) of
// lse (H, Lq), each weight is p = exp(x), x = scale · q·k − lse, computed as exp_rows
// computes it (q·k by one GEMM, then the scale, then the subtraction, then exp), 0 where
// causal / window / key_mask hides a key or lse is -inf. With pos = row + Lk − Lq, added to
// sums (H, 11) float64, row by row in order, for each head:
//   0 mass Σ p   1 entropy −Σ p·x (= −Σ p log p: log p is x itself, no log taken)
//   2 max_j p   3 distance Σ p·|pos − j|   4 p at key 0   5 p at pos − 1   6 p at pos
//   7 Σ p over the row's keys pair_key[pair_ptr[r] : pair_ptr[r + 1]] (ascending, r the
//     row's index from row0)   8 Σ p over those keys + 1
//   9 p at key 0 and 10 the mass, of the rows with pos >= 1 only
// and, with pool_block > 0, added to pooled (H, nq, ceil(Lk / pool_block)) float32: each
// row's sums over blocks of pool_block keys, into its block of rows (row / pool_block).
// Per tile of a head's rows and keys: one GEMM, then each row in two loops (exp_row): the
// exponentials, then every sum at once; mass and distance are summed in float64, the
// entropy in float32 over one tile's keys (at most 1024), then in float64.
constexpr int kStats = 9;     // per row
constexpr int kHeadSums = 11;  // per head

inline float seg_sum(const float* e, int64_t n) {
  using V = Vectorized<float>;
  int64_t j = 0;
  V acc(0.f);
  for (; j + V::size() <= n; j += V::size()) acc = acc + V::loadu(e + j);
  float lanes[V::size()];
  acc.store(lanes);
  float sum = 0.f;
  for (int64_t i = 0; i < V::size(); ++i) sum += lanes[i];
  for (; j < n; ++j) sum += e[j];
  return sum;
}

// mass_distance's float64 lanes, fed one float32 vector of weights at a time (keys j, j + 1,
// ... from a first key whose j − pos is `first`: whole numbers, exact however they are summed):
// Σ e and Σ e·|j − pos| in the same lanes, reduced the same way, as mass_distance. (No lanes
// without AVX: the caller sums those keys one by one.)
struct MassDistanceLanes {
#if defined(CPU_CAPABILITY_AVX512)
  __m512d m0 = _mm512_setzero_pd(), m1 = _mm512_setzero_pd();
  __m512d d0 = _mm512_setzero_pd(), d1 = _mm512_setzero_pd();
  __m512d x0;
  explicit MassDistanceLanes(double first)
      : x0(_mm512_add_pd(_mm512_set_pd(7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_pd(first))) {}
  void add(const Vectorized<float>& e) {
    const __m512 ev = e;
    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(ev));
    const __m512d hi = _mm512_cvtps_pd(
        _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(ev), 1)));
    const __m512d x1 = _mm512_add_pd(x0, _mm512_set1_pd(8.0));
    m0 = _mm512_add_pd(m0, lo);
    m1 = _mm512_add_pd(m1, hi);
    d0 = _mm512_fmadd_pd(lo, _mm512_abs_pd(x0), d0);
    d1 = _mm512_fmadd_pd(hi, _mm512_abs_pd(x1), d1);
    x0 = _mm512_add_pd(x0, _mm512_set1_pd(16.0));
  }
  void reduce(double* m, double* dd) const {
    *m = _mm512_reduce_add_pd(_mm512_add_pd(m0, m1));
    *dd = _mm512_reduce_add_pd(_mm512_add_pd(d0, d1));
  }
#elif defined(CPU_CAPABILITY_AVX2)
  __m256d m0 = _mm256_setzero_pd(), m1 = _mm256_setzero_pd();
  __m256d d0 = _mm256_setzero_pd(), d1 = _mm256_setzero_pd();
  __m256d x0;
  explicit MassDistanceLanes(double first)
      : x0(_mm256_add_pd(_mm256_set_pd(3, 2, 1, 0), _mm256_set1_pd(first))) {}
  void add(const Vectorized<float>& e) {
    const __m256 ev = e;
    const __m256d sign = _mm256_set1_pd(-0.0);
    const __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(ev));
    const __m256d hi = _mm256_cvtps_pd(_mm256_extractf128_ps(ev, 1));
    const __m256d x1 = _mm256_add_pd(x0, _mm256_set1_pd(4.0));
    m0 = _mm256_add_pd(m0, lo);
    m1 = _mm256_add_pd(m1, hi);
    d0 = _mm256_fmadd_pd(lo, _mm256_andnot_pd(sign, x0), d0);
    d1 = _mm256_fmadd_pd(hi, _mm256_andnot_pd(sign, x1), d1);
    x0 = _mm256_add_pd(x0, _mm256_set1_pd(8.0));
  }
  void reduce(double* m, double* dd) const {
    double lanes[4];
    _mm256_storeu_pd(lanes, _mm256_add_pd(m0, m1));
    *m = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    _mm256_storeu_pd(lanes, _mm256_add_pd(d0, d1));
    *dd = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  }
#else
  explicit MassDistanceLanes(double) {}
  void add(const Vectorized<float>&) {}
  void reduce(double* m, double* dd) const { *m = *dd = 0.0; }
#endif
};

#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
constexpr bool kMassLanes = true;
#else
constexpr bool kMassLanes = false;
#endif

// Σ e[a:b) and Σ e[j] · |j − pos| over [a, b), in float64 (the weights' own float32 values,
// products and sums exact to float64's rounding): the lanes, then the scalar tail
inline void mass_distance(const float* e, int64_t a, int64_t b, double pos, double* mass,
                          double* dist) {
  using V = Vectorized<float>;
  int64_t j = a;
  double m = 0.0, dd = 0.0;
  if constexpr (kMassLanes) {
    MassDistanceLanes md(static_cast<double>(a) - pos);
    for (; j + V::size() <= b; j += V::size()) md.add(V::loadu(e + j));
    md.reduce(&m, &dd);
  }
  for (; j < b; ++j) {
    const double v = e[j];
    m += v;
    dd += v * std::fabs(static_cast<double>(j) - pos);
  }
  *mass += m;
  *dist += dd;
}

inline double lane_sum(const Vectorized<float>& v) {
  float lanes[Vectorized<float>::size()];
  v.store(lanes);
  double sum = 0.0;
  for (int64_t i = 0; i < Vectorized<float>::size(); ++i) sum += lanes[i];
  return sum;
}

// The rows' stats into their heads' sums (the layout of head_sums) and their blocks of keys
// into their blocks of rows, row by row in order.
void add_rows(const std::vector<double>& stats, const std::vector<float>& prow,
              const int64_t* hp, int64_t hs, int64_t row0, int64_t R, int64_t off,
              int64_t pool_block, int64_t nkb, int64_t nqb, at::Tensor& sums, float* op) {
  double* out = sums.data_ptr<double>();
  for (int64_t i = 0; i < hs; ++i) {
    double* o = out + hp[i] * kHeadSums;
    for (int64_t r = 0; r < R; ++r) {
      const double* st = stats.data() + (i * R + r) * kStats;
      for (int c = 0; c < kStats; ++c) o[c] += st[c];
      if (row0 + r + off >= 1) {
        o[9] += st[4];
        o[10] += st[0];
      }
      if (nkb) {
        float* dst = op + (hp[i] * nqb + (row0 + r) / pool_block) * nkb;
        const float* src = prow.data() + (i * R + r) * nkb;
        for (int64_t x = 0; x < nkb; ++x) dst[x] += src[x];
      }
    }
  }
}

// A row's pair keys in [k_lo, k_hi) (absolute keys): Σ w at them and at the keys after them,
// w the row's values over the keys [c0, c0 + n)
inline void pair_sums(const int64_t* k0, const int64_t* k1, const float* w, int64_t c0,
                      int64_t k_lo, int64_t k_hi, double* dup, double* ind) {
  for (const int64_t* it = std::lower_bound(k0, k1, k_lo); it != k1 && *it < k_hi; ++it)
    *dup += w[*it - c0];
  for (const int64_t* it = std::lower_bound(k0, k1, k_lo - 1); it != k1 && *it + 1 < k_hi; ++it)
    *ind += w[*it + 1 - c0];
}

// Whether head_sums takes each row of a tile in one pass (exp_row): where mass_distance's
// vector loop steps as many keys as Vectorized<float> holds (16 on AVX-512, 8 on AVX2), so
// that one loop keeps the order of both.
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
constexpr bool kOnePass = true;
#else
constexpr bool kOnePass = false;
#endif

// v itself, rounded: the multiply that gave it is not fused with the subtraction that takes
// it (g++ contracts a * b − c into one FMA, one rounding, in C++ by default); the empty asm
// hands the compiler a value it cannot see the making of
inline float held(float v) {
#if defined(CPU_CAPABILITY_AVX512)
  asm("" : "+v"(v));
#elif defined(CPU_CAPABILITY_AVX2)
  asm("" : "+x"(v));
#endif
  return v;
}

inline Vectorized<float> held(const Vectorized<float>& v) {
#if defined(CPU_CAPABILITY_AVX512)
  __m512 r = v;
  asm("" : "+v"(r));
  return r;
#elif defined(CPU_CAPABILITY_AVX2)
  __m256 r = v;
  asm("" : "+x"(r));
  return r;
#else
  return v;
#endif
}

// The lanes' larger, NaN or not; where every lane is a number, as at::vec::maximum: exp_row
// tells a NaN weight by its float64 mass instead (weights are >= 0, +inf or NaN: their sum
// is NaN only if one of them is)
inline Vectorized<float> max_of(const Vectorized<float>& a, const Vectorized<float>& b) {
#if defined(CPU_CAPABILITY_AVX512)
  return _mm512_max_ps(a, b);
#elif defined(CPU_CAPABILITY_AVX2)
  return _mm256_max_ps(a, b);
#else
  return at::vec::maximum(a, b);
#endif
}

// What exp_row sums over a row of a tile.
struct RowSums {
  double ent;  // Σ p·x (x = log p): float32 lanes, then float64
  bool nan;    // a NaN weight
  float mx;    // the largest weight
  int64_t j;   // the first key past the vector loop (the scalar tail is [j, b))
};

// The end of exp_row: the vector lanes' Σ p·x (lane_sum), NaN and max, then the scalar tail
// [j, b) as the vector loop takes it (x = s·scale − l, the product rounded first; with
// kOnePass off s[j:b) is scaled already)
inline RowSums exp_tail(float* s, int64_t j, int64_t b, float scale, float l, const float* km,
                        const Vectorized<float>& ae, const Vectorized<float>& ax) {
  RowSums out{lane_sum(ae), false, 0.f, j};
  {
    float lanes[Vectorized<float>::size()];
    ax.store(lanes);
    for (int64_t i = 0; i < Vectorized<float>::size(); ++i) {
      out.nan |= std::isnan(lanes[i]);
      out.mx = std::max(out.mx, lanes[i]);
    }
  }
  for (; j < b; ++j) {
    float x = (kOnePass ? held(s[j] * scale) : s[j]) - l;
    float e = std::exp(x);  // as row_exp's tail
    if (km && km[j] == 0.f) e = x = 0.f;
    s[j] = e;
    out.ent += static_cast<double>(e * x);
    out.nan |= std::isnan(e);
    out.mx = std::max(out.mx, e);
  }
  return out;
}

// exp(x) of the keys [j, j + V::size()) of a row, as row_exp (Sleef, within 1 ulp); where the
// key mask km (indexed as the row) hides a key, both the exponential and x are set to 0.
inline Vectorized<float> masked_exp(Vectorized<float>& x, const float* km, int64_t j) {
  using V = Vectorized<float>;
  const V zero(0.f);
  V e = x.exp();
  if (km) {
    const V keep = V::loadu(km + j) != zero;
    e = V::blendv(zero, e, keep);
    x = V::blendv(zero, x, keep);
  }
  return e;
}

// One row of head_sums' tile over its keys [a, b): s[a:b) holds the raw q·k, x = s·scale − l
// (the product rounded, then the difference: two roundings, as the scores are scaled before
// the lse is taken off), p = exp(x) written back over s (p = x = 0 where the key mask km,
// indexed as s, hides the key). With kOnePass, two loops: the exponentials (x kept in xs,
// indexed as s), then every sum in one pass over p and x, with nothing live across a call;
// the sums are those of the separate passes, to the bit: Σ p·x and the max as a vectorised
// loop over [a, b) then its scalar tail; mass and distance (pos relative to s) added to
// *mass and *dist as mass_distance adds them (the same float64 lanes, reduced the same way,
// then the same tail); and, with blocks (pool_block % V::size() == 0 and a on a vector
// boundary of the blocks, the first of which ends at first_end), each block's vector lanes
// (the row's n_blocks blocks in order, V::size() floats each: 0 for one the loop never
// reaches), which seg_sum sums. Without kOnePass, the passes as they are: scale, exp, then
// mass_distance.
inline RowSums exp_row(float* s, float* xs, int64_t a, int64_t b, float scale, float l,
                       const float* km, double pos, double* mass, double* dist, float* blocks,
                       int64_t n_blocks, int64_t first_end, int64_t pool_block) {
  using V = Vectorized<float>;
  const V vl(l), zero(0.f);
  V ae(0.f), ax(0.f);
  int64_t j = a;
  if constexpr (!kOnePass) {
    for (int64_t i = a; i < b; ++i) s[i] *= scale;
    for (; j + V::size() <= b; j += V::size()) {
      V x = V::loadu(s + j) - vl;
      const V e = masked_exp(x, km, j);
      e.store(s + j);
      ae = at::vec::fmadd(e, x, ae);
      ax = at::vec::maximum(ax, e);
    }
    RowSums out = exp_tail(s, j, b, scale, l, km, ae, ax);
    mass_distance(s, a, b, pos, mass, dist);
    return out;
  } else {
    const V vs(scale);
    for (; j + V::size() <= b; j += V::size()) {
      V x = held(V::loadu(s + j) * vs) - vl;
      const V e = masked_exp(x, km, j);
      e.store(s + j);
      x.store(xs + j);
    }
    const int64_t jt = j;  // the scalar tail: [jt, b)
    double m = 0.0, dd = 0.0;
    MassDistanceLanes md(static_cast<double>(a) - pos);
    int64_t nb = 0;
    j = a;
    // block by block (the whole row one block without blocks)
    for (int64_t end = blocks ? first_end : b; j < jt; end += pool_block) {
      V acc(0.f);
      const int64_t stop = std::min(end, jt);
      for (; j < stop; j += V::size()) {
        const V e = V::loadu(s + j);
        ae = at::vec::fmadd(e, V::loadu(xs + j), ae);
        ax = max_of(ax, e);
        acc = acc + e;
        md.add(e);  // mass and distance: mass_distance's loop body, from the register
      }
      if (blocks) acc.store(blocks + V::size() * nb++);
    }
    if (blocks)
      for (; nb < n_blocks; ++nb) zero.store(blocks + V::size() * nb);
    md.reduce(&m, &dd);
    // the tail: its weights first, then mass_distance's own tail over them
    RowSums out = exp_tail(s, jt, b, scale, l, km, ae, ax);
    out.nan |= std::isnan(m);  // a NaN weight in the vector loop (ax does not keep NaN)
    for (int64_t i = jt; i < b; ++i) {
      const double v = s[i];
      m += v;
      dd += v * std::fabs(static_cast<double>(i) - pos);
    }
    *mass += m;
    *dist += dd;
    return out;
  }
}

void head_sums(const at::Tensor& q, const at::Tensor& k, const at::Tensor& lse,
               const at::Tensor& heads, int64_t row0, int64_t R, bool causal, int64_t window,
               const c10::optional<at::Tensor>& key_mask, double scale_d,
               const c10::optional<at::Tensor>& pair_ptr, const c10::optional<at::Tensor>& pair_key,
               int64_t pool_block, at::Tensor& sums, const c10::optional<at::Tensor>& pooled) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && lse.dim() == 2 && heads.dim() == 1,
              "attnlab kernel: head_sums takes q (H, Lq, d), k (H_kv, Lk, d), lse (H, Lq), "
              "heads (hs)");
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && lse.is_contiguous() &&
                  heads.is_contiguous(), "attnlab kernel: head_sums needs contiguous inputs");
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat &&
                  lse.scalar_type() == at::kFloat && heads.scalar_type() == at::kLong,
              "attnlab kernel: head_sums takes float32 q, k, lse and int64 heads");
  const int64_t H = q.size(0), lq = q.size(1), d = q.size(2), Hkv = k.size(0), lk = k.size(1);
  const int64_t hs = heads.size(0);
  TORCH_CHECK(k.size(2) == d && lse.size(0) == H && lse.size(1) == lq && Hkv > 0 &&
                  H % Hkv == 0, "attnlab kernel: head_sums shapes do not match");
  TORCH_CHECK(R >= 0 && row0 >= 0 && row0 + R <= lq, "attnlab kernel: head_sums rows [",
              row0, ", ", row0 + R, ") out of [0, ", lq, ")");
  TORCH_CHECK(sums.scalar_type() == at::kDouble && sums.is_contiguous() && sums.dim() == 2 &&
                  sums.size(0) == H && sums.size(1) == kHeadSums,
              "attnlab kernel: head_sums needs contiguous float64 sums (H, 11)");
  const int64_t* hp = heads.data_ptr<int64_t>();
  for (int64_t i = 0; i < hs; ++i)
    TORCH_CHECK(hp[i] >= 0 && hp[i] < H, "attnlab kernel: head_sums heads out of range");
  const bool* km = nullptr;
  if (key_mask.has_value()) {
    TORCH_CHECK(key_mask->scalar_type() == at::kBool && key_mask->is_contiguous() &&
                    key_mask->dim() == 1 && key_mask->size(0) == lk,
                "attnlab kernel: key_mask must be a contiguous bool (Lk,)");
    km = key_mask->data_ptr<bool>();
  }
  const int64_t* pp = nullptr;
  const int64_t* pk = nullptr;
  if (pair_ptr.has_value() || pair_key.has_value()) {
    TORCH_CHECK(pair_ptr.has_value() && pair_key.has_value() &&
                    pair_ptr->scalar_type() == at::kLong && pair_key->scalar_type() == at::kLong &&
                    pair_ptr->is_contiguous() && pair_key->is_contiguous() &&
                    pair_ptr->dim() == 1 && pair_key->dim() == 1 && pair_ptr->size(0) == R + 1,
                "attnlab kernel: pair_ptr (rows + 1) and pair_key must be contiguous int64");
    pp = pair_ptr->data_ptr<int64_t>();
    pk = pair_key->data_ptr<int64_t>();
    for (int64_t r = 0; r < R; ++r)
      TORCH_CHECK(pp[r] <= pp[r + 1], "attnlab kernel: pair_ptr must not decrease");
    TORCH_CHECK(R == 0 || (pp[0] >= 0 && pp[R] <= pair_key->size(0)),
                "attnlab kernel: pair_ptr must point into pair_key");
  }
  int64_t nkb = 0, nqb = 0;
  float* op = nullptr;
  if (pool_block > 0) {
    nkb = (lk + pool_block - 1) / pool_block;
    TORCH_CHECK(pooled.has_value() && pooled->scalar_type() == at::kFloat &&
                    pooled->is_contiguous() && pooled->dim() == 3 && pooled->size(0) == H &&
                    pooled->size(2) == nkb &&
                    (R == 0 || pooled->size(1) > (row0 + R - 1) / pool_block),
                "attnlab kernel: pool_block needs contiguous float32 pooled (H, nq, ",
                nkb, ") covering the rows' blocks");
    nqb = pooled->size(1);
    op = pooled->data_ptr<float>();
  }
  if (hs == 0 || R == 0 || lk == 0) return;
  at::Tensor kmask_f;  // the key mask as floats: 1 where a key may be seen
  const float* kmf = nullptr;
  if (km) {
    kmask_f = key_mask->to(at::kFloat).contiguous();
    kmf = kmask_f.data_ptr<float>();
  }
  // the query heads of each key head
  const int64_t G = H / Hkv;
  std::vector<std::vector<int64_t>> members(Hkv);  // indices into heads
  for (int64_t i = 0; i < hs; ++i) members[hp[i] / G].push_back(i);
  std::vector<int64_t> groups;
  int64_t most = 1;
  for (int64_t g = 0; g < Hkv; ++g)
    if (!members[g].empty()) {
      groups.push_back(g);
      most = std::max<int64_t>(most, members[g].size());
    }
  // tiles: tc keys (whole pooling blocks where they fit) x tr rows of one head, about 512
  // KiB of scores. A task takes one asked query head and a block of rows (so that the threads
  // share the work out finely, whatever the number of key heads); each tile of keys by its
  // own GEMM, of the same shape and at the same place in the buffers whichever heads are
  // asked (a head's sums do not depend on the others asked with it: disjoint heads add up
  // to all of them, to the bit). Where the rows are one block and the heads share one key
  // head, one task takes them all: it runs on the calling thread, outside any parallel
  // region, and the BLAS may thread its GEMMs as it threads them there
  int64_t tc = 1024;
  if (pool_block > 0) tc = pool_block >= 1024 ? pool_block : (1024 / pool_block) * pool_block;
  tc = std::min(tc, lk);
  const int64_t tr = std::min<int64_t>(R, std::clamp<int64_t>((int64_t(1) << 17) / tc, 8, 128));
  const int64_t nr = (R + tr - 1) / tr;
  std::vector<std::pair<int64_t, int64_t>> units;  // (key head, index into its members)
  for (int64_t g : groups)
    for (int64_t m = 0; m < static_cast<int64_t>(members[g].size()); ++m) units.push_back({g, m});
  const int64_t nu = static_cast<int64_t>(units.size());
  const bool whole = groups.size() == 1 && nr == 1;
  const int64_t tasks = whole ? 1 : nu * nr;
  const float scale = static_cast<float>(scale_d);
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* lp = lse.data_ptr<float>();
  const int64_t off = lk - lq;
  const float kNegInf = -std::numeric_limits<float>::infinity();
  // per row of each asked head: the stats, and its sums over key blocks
  std::vector<double> stats(static_cast<size_t>(hs * R * kStats), 0.0);
  // the pooled blocks go straight into pooled where each block of pool_block rows is one
  // task's (its rows then come in order, as add_rows adds them); else through prow
  const bool direct = nkb && (nr == 1 || (row0 % pool_block == 0 && tr % pool_block == 0));
  std::vector<float> prow(static_cast<size_t>(direct ? 0 : hs * R * nkb), 0.f);

  for_each_task(tasks, [&](auto&& take) {
    using V = Vectorized<float>;
    // 64-byte aligned buffers: the GEMM's rounding must not depend on where they sit. Left
    // uninitialised: the GEMM writes every score it reads (beta = 0)
    std::unique_ptr<float[]> sbuf(new float[static_cast<size_t>(tr * tc + 16)]);
    std::unique_ptr<float[]> qbuf(new float[static_cast<size_t>(most * tr * d + 16)]);
    float* s = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(sbuf.get()) + 63) &
                                        ~uintptr_t(63));
    float* qb = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(qbuf.get()) + 63) &
                                         ~uintptr_t(63));
    std::vector<int64_t> lo(tr), hi(tr);
    // a row's pooled blocks in the one pass: each block's vector lanes, then its sums
    const int64_t row_blocks = nkb ? tc / pool_block + 2 : 0;
    std::vector<float> lanes(static_cast<size_t>(row_blocks * V::size()));
    std::vector<float> bsum(static_cast<size_t>(row_blocks));
    std::vector<float> xs(static_cast<size_t>(kOnePass ? tc : 0));  // a row's x = s·scale − l
    for (int64_t t; (t = take()) >= 0;) {
      const int64_t rb = whole ? 0 : zigzag(t % nr, nr);
      const int64_t u0 = whole ? 0 : t / nr, u1 = whole ? nu : u0 + 1;
      const int64_t r0 = rb * tr, rows_t = std::min(R, r0 + tr) - r0;
      // the keys each row may see: [lo, hi)
      int64_t cmin = lk, cmax = 0;
      for (int64_t r = 0; r < rows_t; ++r) {
        const int64_t pos = row0 + r0 + r + off;
        int64_t a = 0, b = lk;
        if (causal) b = pos + 1;
        if (window > 0) {
          a = std::max<int64_t>(a, pos - window + 1);
          b = std::min<int64_t>(b, pos + window);
        }
        a = std::clamp<int64_t>(a, 0, lk);
        b = std::clamp<int64_t>(b, a, lk);
        lo[r] = a;
        hi[r] = b;
        if (b > a) {
          cmin = std::min(cmin, a);
          cmax = std::max(cmax, b);
        }
      }
      for (int64_t u = u0; u < u1; ++u) {
        const int64_t g = units[u].first, m = units[u].second;
        const int64_t ih = members[g][m], hq = hp[ih];  // the head: its index in heads, itself
        if (direct) {
          // what add_rows adds to the blocks no key of a row falls in: +0 (a −0 becomes +0)
          for (int64_t rblk = (row0 + r0) / pool_block; rblk * pool_block < row0 + r0 + rows_t;
               ++rblk) {
            float* dst = op + (hq * nqb + rblk) * nkb;
            for (int64_t x = 0; x < nkb; ++x) dst[x] += 0.f;
          }
        }
        if (cmax <= cmin) continue;
        // the tile's query rows, where they sit among those of every member head
        float* qm = qb + m * rows_t * d;
        std::copy(qp + (hq * lq + row0 + r0) * d, qp + (hq * lq + row0 + r0 + rows_t) * d, qm);
        for (int64_t c0 = cmin / tc * tc; c0 < cmax; c0 += tc) {
          const int64_t cols = std::min(cmax, c0 + tc) - c0;  // no key past the last one seen
          gemm_rm<float>(false, true, rows_t, cols, d, 1.f, qm, d, kp + (g * lk + c0) * d, d,
                         0.f, s, cols);
          for (int64_t r = 0; r < rows_t; ++r) {
            const int64_t a = std::max<int64_t>(lo[r], c0) - c0;
            const int64_t b = std::min<int64_t>(hi[r], c0 + cols) - c0;
            if (b <= a) continue;
            const int64_t row = row0 + r0 + r;
            const float l = lp[hq * lq + row];
            if (l == kNegInf) continue;  // no visible key: all zeros
            float* sr = s + r * cols;
            const int64_t pos = row + off;
            double* st = stats.data() + (ih * R + r0 + r) * kStats;
            // the row's pooled blocks [blk0, blk1), summed in the pass where the vector loop
            // steps through them as seg_sum does (from each block's first key)
            const int64_t blk0 = nkb ? (c0 + a) / pool_block : 0;
            const int64_t blk1 = nkb ? (c0 + b - 1) / pool_block + 1 : 0;
            const bool one_pass_blocks = kOnePass && nkb && pool_block % V::size() == 0 &&
                                         (c0 + a) % V::size() == 0;
            // the scale after q·k, rounded as exp_rows (and torch's (q @ kᵀ) * scale) round it
            const RowSums rs = exp_row(sr, xs.data(), a, b, scale, l, kmf ? kmf + c0 : nullptr,
                                       static_cast<double>(pos - c0), &st[0], &st[3],
                                       one_pass_blocks ? lanes.data() : nullptr, blk1 - blk0,
                                       (blk0 + 1) * pool_block - c0, pool_block);
            st[1] -= rs.ent;
            st[2] = rs.nan ? std::numeric_limits<double>::quiet_NaN()
                           : std::max(st[2], static_cast<double>(rs.mx));
            auto at_key = [&](int64_t key) -> double {  // p at absolute key, 0 if not here
              const int64_t jl = key - c0;
              return (jl >= a && jl < b) ? static_cast<double>(sr[jl]) : 0.0;
            };
            st[4] += at_key(0);
            if (pos >= 1) st[5] += at_key(pos - 1);
            if (pos >= 0) st[6] += at_key(pos);
            if (pp)
              pair_sums(pk + pp[r0 + r], pk + pp[r0 + r + 1], sr, c0, c0 + a, c0 + b, &st[7],
                        &st[8]);
            if (!nkb) continue;
            float* pr = direct ? op + (hq * nqb + row / pool_block) * nkb
                               : prow.data() + (ih * R + r0 + r) * nkb;
            if (one_pass_blocks) {
              // seg_sum's sums: from 0, its lanes in order, then the keys of the scalar tail
              // (within one block: the tail is shorter than a vector, which does not cross
              // a block)
              const int64_t n = blk1 - blk0;
              std::fill(bsum.begin(), bsum.begin() + n, 0.f);
              for (int64_t i = 0; i < V::size(); ++i)
                for (int64_t x = 0; x < n; ++x) bsum[x] += lanes[x * V::size() + i];
              for (int64_t j = rs.j; j < b; ++j) bsum[(c0 + j) / pool_block - blk0] += sr[j];
              for (int64_t x = 0; x < n; ++x) pr[blk0 + x] += bsum[x];
            } else {
              for (int64_t blk = blk0; blk < blk1; ++blk) {
                const int64_t s0 = std::max<int64_t>(blk * pool_block - c0, a);
                const int64_t s1 = std::min<int64_t>((blk + 1) * pool_block - c0, b);
                pr[blk] += seg_sum(sr + s0, s1 - s0);
              }
            }
          }
        }
      }
    }
  });
  add_rows(stats, prow, hp, hs, row0, R, off, pool_block, direct ? 0 : nkb, nqb, sums, op);
}

// One piece row of merged_head_sums' tile over its keys [a, b): s[a:b) holds the raw q·k,
// x = s·scale − l (the product rounded, then the difference, as head_sums' exp_row), written
// to x[a:b), and p = exp(x) back over s (Sleef's exponential, the scalar tail std::exp; p =
// x = 0 where the key mask km, indexed as s, hides the key)
inline void piece_exp(float* s, float* x, int64_t a, int64_t b, float scale, float l,
                      const float* km) {
  using V = Vectorized<float>;
  const V vs(scale), vl(l);
  int64_t j = a;
  for (; j + V::size() <= b; j += V::size()) {
    V xv = held(V::loadu(s + j) * vs) - vl;
    const V e = masked_exp(xv, km, j);
    e.store(s + j);
    xv.store(x + j);
  }
  for (; j < b; ++j) {
    float xj = held(s[j] * scale) - l;
    float e = std::exp(xj);
    if (km && km[j] == 0.f) e = xj = 0.f;
    s[j] = e;
    x[j] = xj;
  }
}

// One row of merged weights over a tile's key tokens [0, n): w, and x = log w (kept from the
// exponentials where w is one of them). In one pass, as exp_row's: Σ w·x and the largest
// weight (a NaN seen through the float64 mass), mass and distance |j − pos| added to *mass
// and *dist in float64 lanes, and with blocks (pool_block % V::size() == 0, block 0 starting
// at key 0) each block's vector lanes; the scalar tail [out.j, n) as mass_distance's.
inline RowSums token_row(const float* w, const float* x, int64_t n, double pos, double* mass,
                         double* dist, float* blocks, int64_t pool_block) {
  using V = Vectorized<float>;
  V ae(0.f), ax(0.f);
  const int64_t jt = n / V::size() * V::size();
  double m = 0.0, dd = 0.0;
  MassDistanceLanes md(-pos);
  int64_t j = 0, nb = 0;
  for (int64_t end = blocks ? pool_block : jt; j < jt; end += pool_block) {
    V acc(0.f);
    const int64_t stop = std::min(end, jt);
    for (; j < stop; j += V::size()) {
      const V e = V::loadu(w + j);
      ae = at::vec::fmadd(e, V::loadu(x + j), ae);
      ax = max_of(ax, e);
      acc = acc + e;
      md.add(e);
    }
    if (blocks) acc.store(blocks + V::size() * nb++);
  }
  if (blocks)  // the blocks the vector loop never reaches (the tail's only): 0
    for (const int64_t all = (n + pool_block - 1) / pool_block; nb < all; ++nb)
      V(0.f).store(blocks + V::size() * nb);
  md.reduce(&m, &dd);
  if constexpr (!kMassLanes)  // no float64 lanes here: the vector part's keys one by one
    for (int64_t i = 0; i < jt; ++i) {
      const double v = w[i];
      m += v;
      dd += v * std::fabs(static_cast<double>(i) - pos);
    }
  RowSums out{lane_sum(ae), false, 0.f, jt};
  {
    float lanes_[V::size()];
    ax.store(lanes_);
    for (int64_t i = 0; i < V::size(); ++i) out.mx = std::max(out.mx, lanes_[i]);
  }
  for (int64_t i = jt; i < n; ++i) {
    out.ent += static_cast<double>(w[i] * x[i]);
    out.mx = std::max(out.mx, w[i]);
    const double v = w[i];
    m += v;
    dd += v * std::fabs(static_cast<double>(i) - pos);
  }
  out.nan = std::isnan(m);  // w >= 0: a NaN weight, and only one, makes the mass NaN
  *mass += m;
  *dist += dd;
  return out;
}

// The log-sum-exp of one row of raw q·k over its keys [a, b): x = s·scale (the product
// rounded, as piece_exp takes it), m = max x, then m + log Σ exp(x − m) (Sleef's exponential,
// the scalar tail std::exp); −inf for a row without keys or whose scores are all −inf.
inline float row_lse(const float* s, int64_t a, int64_t b, float scale) {
  using V = Vectorized<float>;
  if (b <= a) return kNegInfF;
  const V vs(scale);
  V vm(kNegInfF);
  int64_t j = a;
  for (; j + V::size() <= b; j += V::size()) vm = at::vec::maximum(vm, held(V::loadu(s + j) * vs));
  float lanes[V::size()];
  vm.store(lanes);
  float m = kNegInfF;
  for (int64_t i = 0; i < V::size(); ++i) m = std::isnan(lanes[i]) ? lanes[i] : std::max(m, lanes[i]);
  for (int64_t t = j; t < b; ++t) {
    const float x = held(s[t] * scale);
    m = std::isnan(x) ? x : std::max(m, x);
  }
  if (m == kNegInfF || std::isnan(m)) return m;
  const V vm2(m);
  V acc(0.f);
  for (j = a; j + V::size() <= b; j += V::size())
    acc = acc + (held(V::loadu(s + j) * vs) - vm2).exp();
  acc.store(lanes);
  float sum = 0.f;
  for (int64_t i = 0; i < V::size(); ++i) sum += lanes[i];
  for (; j < b; ++j) sum += std::exp(held(s[j] * scale) - m);
  return m + std::log(sum);
}

// head_sums for a trace of merged tokens: `groups` (n + 1) int64 cuts the Lq = Lk pieces of
// q, k and lse into n tokens of consecutive pieces (token t: pieces groups[t] to
// groups[t + 1]). A merged weight is w[a, b] = mean over a's pieces i of the sum over b's
// pieces j of p_ij (summed over the key pieces, then over the query pieces, then divided by
// their number, as AttentionTrace merges); rows [row0, row0 + rows), pair keys, positions
// (pos = the token a itself) and pooled blocks are in tokens. Per row the same sums as
// head_sums, the entropy −Σ_b w log w in float32 over one tile of keys, then in float64: where
// w is one exponential p = exp(x) (a row of one piece, a key token of one piece), log w is x
// (no log, as head_sums takes it); elsewhere w is clamped to float32's tiny and its log taken.
// Tiles of 64 rows by 1024 keys (in tokens; fewer keys than 1024: up to 128 rows).
//
// With `vp` (the layer's values, (H_kv, Lk, dv) float32, contiguous), the attention itself
// as well (attention_head_sums): the lse is not read but computed, each piece row's over
// every key it sees at once (a tile of keys as wide as the row: row_lse), and written to
// `lse_out` (H, Lk); the weights p = exp(x − lse) as above; and the output P·V of each piece
// row written to `outp` (H, Lk, dv). Every row and head is then asked once (the caller's
// checks), so that each output row is written once.
void merged_pass(const at::Tensor& q, const at::Tensor& k, const at::Tensor& lse,
                 const at::Tensor& heads, const at::Tensor& groups, int64_t row0, int64_t R,
                 bool causal, int64_t window, const c10::optional<at::Tensor>& key_mask,
                 double scale_d, const c10::optional<at::Tensor>& pair_ptr,
                 const c10::optional<at::Tensor>& pair_key, int64_t pool_block,
                 at::Tensor& sums, const c10::optional<at::Tensor>& pooled, const float* vp,
                 int64_t dv, float* outp, float* lse_out) {
  const bool fused = vp != nullptr;
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && lse.dim() == 2 && heads.dim() == 1 &&
                  groups.dim() == 1,
              "attnlab kernel: merged_head_sums takes q (H, L, d), k (H_kv, L, d), lse (H, L), "
              "heads (hs), groups (n + 1)");
  TORCH_CHECK(q.is_contiguous() && k.is_contiguous() && lse.is_contiguous() &&
                  heads.is_contiguous() && groups.is_contiguous(),
              "attnlab kernel: merged_head_sums needs contiguous inputs");
  TORCH_CHECK(q.scalar_type() == at::kFloat && k.scalar_type() == at::kFloat &&
                  lse.scalar_type() == at::kFloat && heads.scalar_type() == at::kLong &&
                  groups.scalar_type() == at::kLong,
              "attnlab kernel: merged_head_sums takes float32 q, k, lse and int64 heads, groups");
  const int64_t H = q.size(0), lp = q.size(1), d = q.size(2), Hkv = k.size(0);
  const int64_t hs = heads.size(0), n = groups.size(0) - 1;
  TORCH_CHECK(k.size(1) == lp && k.size(2) == d && lse.size(0) == H && lse.size(1) == lp &&
                  Hkv > 0 && H % Hkv == 0,
              "attnlab kernel: merged_head_sums shapes do not match (self-attention pieces)");
  const int64_t* gp = groups.data_ptr<int64_t>();
  TORCH_CHECK(n >= 0 && gp[0] == 0 && gp[n] == lp,
              "attnlab kernel: groups must run from 0 to the number of pieces");
  for (int64_t t = 0; t < n; ++t)
    TORCH_CHECK(gp[t] < gp[t + 1], "attnlab kernel: every group needs a piece, in order");
  TORCH_CHECK(R >= 0 && row0 >= 0 && row0 + R <= n, "attnlab kernel: merged_head_sums rows [",
              row0, ", ", row0 + R, ") out of [0, ", n, ")");
  TORCH_CHECK(sums.scalar_type() == at::kDouble && sums.is_contiguous() && sums.dim() == 2 &&
                  sums.size(0) == H && sums.size(1) == kHeadSums,
              "attnlab kernel: merged_head_sums needs contiguous float64 sums (H, 11)");
  const int64_t* hp = heads.data_ptr<int64_t>();
  for (int64_t i = 0; i < hs; ++i)
    TORCH_CHECK(hp[i] >= 0 && hp[i] < H, "attnlab kernel: merged_head_sums heads out of range");
  const float* kmf = nullptr;
  at::Tensor kmask_f;
  if (key_mask.has_value()) {
    TORCH_CHECK(key_mask->scalar_type() == at::kBool && key_mask->is_contiguous() &&
                    key_mask->dim() == 1 && key_mask->size(0) == lp,
                "attnlab kernel: key_mask must be a contiguous bool (pieces,)");
    kmask_f = key_mask->to(at::kFloat).contiguous();
    kmf = kmask_f.data_ptr<float>();
  }
  const int64_t* pp = nullptr;
  const int64_t* pk = nullptr;
  if (pair_ptr.has_value() || pair_key.has_value()) {
    TORCH_CHECK(pair_ptr.has_value() && pair_key.has_value() &&
                    pair_ptr->scalar_type() == at::kLong && pair_key->scalar_type() == at::kLong &&
                    pair_ptr->is_contiguous() && pair_key->is_contiguous() &&
                    pair_ptr->dim() == 1 && pair_key->dim() == 1 && pair_ptr->size(0) == R + 1,
                "attnlab kernel: pair_ptr (rows + 1) and pair_key must be contiguous int64");
    pp = pair_ptr->data_ptr<int64_t>();
    pk = pair_key->data_ptr<int64_t>();
    for (int64_t r = 0; r < R; ++r)
      TORCH_CHECK(pp[r] <= pp[r + 1], "attnlab kernel: pair_ptr must not decrease");
    TORCH_CHECK(R == 0 || (pp[0] >= 0 && pp[R] <= pair_key->size(0)),
                "attnlab kernel: pair_ptr must point into pair_key");
  }
  int64_t nkb = 0, nqb = 0;
  float* op = nullptr;
  if (pool_block > 0) {
    nkb = (n + pool_block - 1) / pool_block;
    TORCH_CHECK(pooled.has_value() && pooled->scalar_type() == at::kFloat &&
                    pooled->is_contiguous() && pooled->dim() == 3 && pooled->size(0) == H &&
                    pooled->size(2) == nkb &&
                    (R == 0 || pooled->size(1) > (row0 + R - 1) / pool_block),
                "attnlab kernel: pool_block needs contiguous float32 pooled (H, nq, ", nkb,
                ") covering the rows' blocks");
    nqb = pooled->size(1);
    op = pooled->data_ptr<float>();
  }
  if (hs == 0 || R == 0 || n == 0) return;
  const int64_t G = H / Hkv;
  std::vector<std::vector<int64_t>> members(Hkv);
  for (int64_t i = 0; i < hs; ++i) members[hp[i] / G].push_back(i);
  std::vector<int64_t> kv_groups;
  int64_t most = 1;
  for (int64_t g = 0; g < Hkv; ++g)
    if (!members[g].empty()) {
      kv_groups.push_back(g);
      most = std::max<int64_t>(most, members[g].size());
    }
  // tiles in tokens: tr rows x tc keys (whole pooling blocks where they fit); the buffers hold
  // the most pieces any such tile has
  int64_t tc = 1024;
  if (pool_block > 0) tc = pool_block >= 1024 ? pool_block : (1024 / pool_block) * pool_block;
  // fused: a row's every key in one tile (its lse first), 2^18 / L rows (32 at 8,192
  // pieces; SmolLM2 traced at 8,192 tokens: 35 s at 8 rows, 32 s at 16, 31.5-34 s at 32,
  // 33 s at 64, on a noisy machine)
  tc = fused ? n : std::min(tc, n);
  const int64_t tr = std::min<int64_t>(
      R, fused ? std::clamp<int64_t>((int64_t(1) << 18) / std::max<int64_t>(lp, 1), 4, 128)
               : std::clamp<int64_t>((int64_t(1) << 16) / tc, 8, 128));
  const int64_t nr = (R + tr - 1) / tr;
  int64_t most_rows = 1, most_cols = 1;
  for (int64_t rb = 0; rb < nr; ++rb) {
    const int64_t a0 = row0 + rb * tr, a1 = std::min(row0 + R, a0 + tr);
    most_rows = std::max(most_rows, gp[a1] - gp[a0]);
  }
  for (int64_t b0 = 0; b0 < n; b0 += tc)
    most_cols = std::max(most_cols, gp[std::min(n, b0 + tc)] - gp[b0]);
  const int64_t tasks = static_cast<int64_t>(kv_groups.size()) * nr;
  const float scale = static_cast<float>(scale_d);
  const float* qp = q.data_ptr<float>();
  const float* kp = k.data_ptr<float>();
  const float* lp_ = lse.data_ptr<float>();
  const float kNegInf = -std::numeric_limits<float>::infinity();
  const float tiny = std::numeric_limits<float>::min();
  std::vector<double> stats(static_cast<size_t>(hs * R * kStats), 0.0);
  std::vector<float> prow(static_cast<size_t>(hs * R * nkb), 0.f);

  for_each_task(tasks, [&](auto&& take) {
    using V = Vectorized<float>;
    std::vector<float> sbuf(static_cast<size_t>(most * most_rows * most_cols + 16));
    std::vector<float> xbuf(static_cast<size_t>(most * most_rows * most_cols + 16));
    std::vector<float> obuf(fused ? static_cast<size_t>(most * most_rows * dv) : 0);
    std::vector<float> qbuf(static_cast<size_t>(most * most_rows * d + 16));
    float* s_all = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(sbuf.data()) + 63) &
                                            ~uintptr_t(63));
    float* xs_all = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(xbuf.data()) + 63) &
                                             ~uintptr_t(63));
    float* qb = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(qbuf.data()) + 63) &
                                         ~uintptr_t(63));
    std::vector<int64_t> lo(most_rows), hi(most_rows);
    std::vector<float> w(static_cast<size_t>(tc + 16)), part(static_cast<size_t>(tc + 16));
    std::vector<float> wx(static_cast<size_t>(tc + 16));  // a token row's x = log w
    // a row's pooled blocks in its one pass (token_row): each block's vector lanes, its sums
    const bool vec_blocks = nkb && pool_block % V::size() == 0;
    const int64_t tile_blocks = nkb ? (tc + pool_block - 1) / pool_block : 0;
    std::vector<float> lanes(static_cast<size_t>(tile_blocks * V::size()));
    std::vector<float> bsum(static_cast<size_t>(tile_blocks));
    struct Run {
      int64_t b, e;  // key tokens [b, e) of the tile
      bool one;      // each of one piece
    };
    std::vector<Run> runs;
    for (int64_t t; (t = take()) >= 0;) {
      const int64_t g = kv_groups[t / nr], rb = zigzag(t % nr, nr);
      const std::vector<int64_t>& mem = members[g];
      const int64_t nm = static_cast<int64_t>(mem.size());
      const int64_t a0 = row0 + rb * tr, a1 = std::min(row0 + R, a0 + tr);
      const int64_t p0 = gp[a0], p1 = gp[a1], np = p1 - p0;  // the tile's query pieces
      int64_t cmin = lp, cmax = 0;
      for (int64_t i = 0; i < np; ++i) {
        const int64_t pos = p0 + i;
        int64_t a = 0, b = lp;
        if (causal) b = pos + 1;
        if (window > 0) {
          a = std::max<int64_t>(a, pos - window + 1);
          b = std::min<int64_t>(b, pos + window);
        }
        a = std::clamp<int64_t>(a, 0, lp);
        b = std::clamp<int64_t>(b, a, lp);
        lo[i] = a;
        hi[i] = b;
        if (b > a) {
          cmin = std::min(cmin, a);
          cmax = std::max(cmax, b);
        }
      }
      // the key tokens a row of the tile sees lie in [t_lo, t_hi): the token of piece cmin,
      // to the last token starting before cmax (tiles of keys stay on multiples of tc)
      const int64_t t_hi = cmax > 0 ? std::upper_bound(gp, gp + n + 1, cmax - 1) - gp : 0;
      const int64_t t_lo = std::upper_bound(gp, gp + n + 1, cmin) - gp - 1;
      for (int64_t m = 0; m < nm; ++m) {
        const float* src = qp + (hp[mem[m]] * lp + p0) * d;
        std::copy(src, src + np * d, qb + m * np * d);
      }
      for (int64_t b0 = t_lo / tc * tc; b0 < t_hi; b0 += tc) {
        const int64_t b1 = std::min({n, b0 + tc, t_hi}), nt = b1 - b0;  // the tile's key tokens
        const int64_t c0 = gp[b0], cols = gp[b1] - c0;           // and their pieces
        // the tile's key tokens as runs: of one piece each (a piece row's values copied as
        // they are) or of several (each token's pieces summed in order, from 0)
        runs.clear();
        for (int64_t bb = 0; bb < nt;) {
          const bool one = gp[b0 + bb + 1] - gp[b0 + bb] == 1;
          int64_t e = bb + 1;
          while (e < nt && (gp[b0 + e + 1] - gp[b0 + e] == 1) == one) ++e;
          runs.push_back({bb, e, one});
          bb = e;
        }
        // a piece row's key-token sums over the tile into dst
        auto gather = [&](const float* sr, float* dst) {
          for (const Run& u : runs) {
            if (u.one) {
              const int64_t j0 = gp[b0 + u.b] - c0;
              std::copy(sr + j0, sr + j0 + (u.e - u.b), dst + u.b);
              continue;
            }
            for (int64_t bb = u.b; bb < u.e; ++bb) {
              float ks = 0.f;
              for (int64_t j = gp[b0 + bb] - c0; j < gp[b0 + bb + 1] - c0; ++j) ks += sr[j];
              dst[bb] = ks;
            }
          }
        };
        // the key head's query heads in one GEMM (its keys packed once): member m's rows at
        // s_all + m·np·cols
        gemm_rm<float>(false, true, nm * np, cols, d, 1.f, qb, d, kp + (g * lp + c0) * d, d, 0.f,
                       s_all, cols);
        for (int64_t m = 0; m < nm; ++m) {
          const int64_t hq = hp[mem[m]];
          float* s = s_all + m * np * cols;
          float* xs = xs_all + m * np * cols;
          for (int64_t i = 0; i < np; ++i) {  // each piece row's weights, 0 where hidden
            float* sr = s + i * cols;
            float* xr = xs + i * cols;
            const int64_t a = std::clamp<int64_t>(lo[i] - c0, 0, cols);
            const int64_t b = std::clamp<int64_t>(hi[i] - c0, a, cols);
            const float l = fused ? row_lse(sr, a, b, scale) : lp_[hq * lp + p0 + i];
            if (fused) lse_out[hq * lp + p0 + i] = l;
            if (l == kNegInf || b <= a) {
              std::fill(sr, sr + cols, 0.f);
              std::fill(xr, xr + cols, 0.f);
              continue;
            }
            std::fill(sr, sr + a, 0.f);
            std::fill(sr + b, sr + cols, 0.f);
            std::fill(xr, xr + a, 0.f);
            std::fill(xr + b, xr + cols, 0.f);
            piece_exp(sr, xr, a, b, scale, l, kmf ? kmf + c0 : nullptr);
          }
        }
        if (fused) {  // the piece rows' output, every member's in one GEMM: P·V (0 where hidden)
          gemm_rm<float>(false, false, nm * np, dv, cols, 1.f, s_all, cols,
                         vp + (g * lp + c0) * dv, dv, 0.f, obuf.data(), dv);
          for (int64_t m = 0; m < nm; ++m)
            std::copy(obuf.data() + m * np * dv, obuf.data() + (m + 1) * np * dv,
                      outp + (hp[mem[m]] * lp + p0) * dv);
        }
        for (int64_t m = 0; m < nm; ++m) {
          const float* s = s_all + m * np * cols;
          const float* xs = xs_all + m * np * cols;
          for (int64_t ta = a0; ta < a1; ++ta) {  // each token row of the tile
            // summed over each key token's pieces, then over the row's pieces in order, then
            // divided by their number (the first piece's sums are 0 + them: taken as they are;
            // one piece: no division)
            const int64_t i0 = gp[ta] - p0, i1 = gp[ta + 1] - p0;
            // one piece against keys of one piece each: the row itself, and its x
            const bool itself = i1 - i0 == 1 && runs.size() == 1 && runs[0].one;
            const float* wr = w.data();
            if (itself) {
              wr = s + i0 * cols;
            } else {
              gather(s + i0 * cols, w.data());
              for (int64_t i = i0 + 1; i < i1; ++i) {
                gather(s + i * cols, part.data());
                int64_t bb = 0;
                for (; bb + V::size() <= nt; bb += V::size())
                  (V::loadu(w.data() + bb) + V::loadu(part.data() + bb)).store(w.data() + bb);
                for (; bb < nt; ++bb) w[bb] += part[bb];
              }
              if (i1 - i0 > 1) {
                const float cnt = static_cast<float>(i1 - i0);
                const V vc(cnt);
                int64_t bb = 0;
                for (; bb + V::size() <= nt; bb += V::size())
                  (V::loadu(w.data() + bb) / vc).store(w.data() + bb);
                for (; bb < nt; ++bb) w[bb] /= cnt;
              }
            }
            // x = log w in token order: where the row and a key token are one piece each, the
            // x its exponential was taken of (no log); elsewhere the log of w clamped to
            // float32's tiny
            const float* xw = wx.data();
            if (itself) {
              xw = xs + i0 * cols;
            } else if (i1 - i0 == 1) {
              const float* xr_ = xs + i0 * cols;
              for (const Run& u : runs) {
                if (u.one) {
                  const int64_t j0 = gp[b0 + u.b] - c0;
                  std::copy(xr_ + j0, xr_ + j0 + (u.e - u.b), wx.data() + u.b);
                  continue;
                }
                for (int64_t bb = u.b; bb < u.e; ++bb) wx[bb] = std::log(std::max(wr[bb], tiny));
              }
            } else {
              const V vt(tiny);
              int64_t bb = 0;
              for (; bb + V::size() <= nt; bb += V::size())
                at::vec::maximum(V::loadu(wr + bb), vt).log().store(wx.data() + bb);
              for (; bb < nt; ++bb) wx[bb] = std::log(std::max(wr[bb], tiny));
            }
            const int64_t r = ta - row0;
            double* st = stats.data() + (mem[m] * R + r) * kStats;
            const RowSums rs = token_row(wr, xw, nt, static_cast<double>(ta - b0), &st[0],
                                         &st[3], vec_blocks ? lanes.data() : nullptr,
                                         pool_block);
            st[1] -= rs.ent;
            st[2] = rs.nan ? std::numeric_limits<double>::quiet_NaN()
                           : std::max(st[2], static_cast<double>(rs.mx));
            auto at_key = [&](int64_t key) -> double {
              return (key >= b0 && key < b1) ? static_cast<double>(wr[key - b0]) : 0.0;
            };
            st[4] += at_key(0);
            if (ta >= 1) st[5] += at_key(ta - 1);
            st[6] += at_key(ta);
            if (pp) pair_sums(pk + pp[r], pk + pp[r + 1], wr, b0, b0, b1, &st[7], &st[8]);
            if (!nkb) continue;
            float* pr = prow.data() + (mem[m] * R + r) * nkb;
            const int64_t blk0 = b0 / pool_block, nblk = (nt + pool_block - 1) / pool_block;
            if (vec_blocks) {
              // seg_sum's sums of each block: its lanes in order, then the keys of the tail
              std::fill(bsum.begin(), bsum.begin() + nblk, 0.f);
              for (int64_t i = 0; i < V::size(); ++i)
                for (int64_t x = 0; x < nblk; ++x) bsum[x] += lanes[x * V::size() + i];
              for (int64_t jj = rs.j; jj < nt; ++jj) bsum[jj / pool_block] += wr[jj];
              for (int64_t x = 0; x < nblk; ++x) pr[blk0 + x] += bsum[x];
            } else {
              for (int64_t x = 0; x < nblk; ++x) {
                const int64_t s0 = x * pool_block, s1 = std::min(nt, s0 + pool_block);
                pr[blk0 + x] += seg_sum(wr + s0, s1 - s0);
              }
            }
          }
        }
      }
    }
  });
  add_rows(stats, prow, hp, hs, row0, R, 0, pool_block, nkb, nqb, sums, op);
}

void merged_head_sums(const at::Tensor& q, const at::Tensor& k, const at::Tensor& lse,
                      const at::Tensor& heads, const at::Tensor& groups, int64_t row0, int64_t R,
                      bool causal, int64_t window, const c10::optional<at::Tensor>& key_mask,
                      double scale_d, const c10::optional<at::Tensor>& pair_ptr,
                      const c10::optional<at::Tensor>& pair_key, int64_t pool_block,
                      at::Tensor& sums, const c10::optional<at::Tensor>& pooled) {
  merged_pass(q, k, lse, heads, groups, row0, R, causal, window, key_mask, scale_d, pair_ptr,
              pair_key, pool_block, sums, pooled, nullptr, 0, nullptr, nullptr);
}

// The attention of one layer of self-attention (one sequence, no key mask, causal or not)
// and its head sums in one pass: out (H, L, dv) = softmax(q·kᵀ·scale)·v and lse (H, L) are
// written, and every head's sums over every merged token (groups: as merged_head_sums; one
// piece a token for a trace without merged tokens) added to `sums` (and `pooled`), as
// merged_head_sums adds them given that lse.
void attention_head_sums(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const at::Tensor& groups, bool causal, double scale_d,
                         const c10::optional<at::Tensor>& pair_ptr,
                         const c10::optional<at::Tensor>& pair_key, int64_t pool_block,
                         at::Tensor& out, at::Tensor& lse, at::Tensor& sums,
                         const c10::optional<at::Tensor>& pooled) {
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && v.dim() == 3 && out.dim() == 3 && lse.dim() == 2,
              "attnlab kernel: attention_head_sums takes q (H, L, d), k (H_kv, L, d), "
              "v (H_kv, L, dv), out (H, L, dv), lse (H, L)");
  TORCH_CHECK(v.is_contiguous() && out.is_contiguous() && lse.is_contiguous() &&
                  v.scalar_type() == at::kFloat && out.scalar_type() == at::kFloat &&
                  lse.scalar_type() == at::kFloat,
              "attnlab kernel: attention_head_sums needs contiguous float32 v, out and lse");
  const int64_t H = q.size(0), L = q.size(1), dv = v.size(2);
  TORCH_CHECK(v.size(0) == k.size(0) && v.size(1) == L && out.size(0) == H &&
                  out.size(1) == L && out.size(2) == dv && lse.size(0) == H && lse.size(1) == L,
              "attnlab kernel: attention_head_sums shapes do not match");
  const at::Tensor heads = at::arange(H, at::kLong);
  merged_pass(q, k, lse, heads, groups, 0, groups.size(0) - 1, causal, 0, c10::nullopt,
              scale_d, pair_ptr, pair_key, pool_block, sums, pooled, v.data_ptr<float>(), dv,
              out.data_ptr<float>(), lse.data_ptr<float>());
}

// how the kernel was compiled: the vector ISA at::vec uses here
std::string capability() {
#if defined(CPU_CAPABILITY_AVX512)
  return "AVX512";
#elif defined(CPU_CAPABILITY_AVX2)
  return "AVX2";
#else
  return "DEFAULT";
#endif
}

}  // namespace

TORCH_LIBRARY(attnlab_kernel, m) {
  m.def("forward(Tensor q, Tensor k, Tensor v, Tensor? mask, Tensor? v_raw, Tensor? bad_keys, "
        "bool causal, float scale, bool want_lse, int tile_rows, bool heads_inner) -> Tensor[]");
  m.def("backward(Tensor q, Tensor k, Tensor v, Tensor weights, Tensor? d_out, "
        "Tensor? d_weights, Tensor? d_lse, bool causal, float scale, int tile_rows) -> Tensor[]");
  m.def("capability() -> str", &capability);
  m.def("release_memory() -> int", &release_memory);
  m.def("exp_rows(Tensor q, Tensor k, Tensor lse, Tensor rows, int col0, int lq, int lk, "
        "bool causal, int window, Tensor? key_mask, float scale) -> Tensor");
  m.def("head_sums(Tensor q, Tensor k, Tensor lse, Tensor heads, int row0, int rows, "
        "bool causal, int window, Tensor? key_mask, float scale, Tensor? pair_ptr, "
        "Tensor? pair_key, int pool_block, Tensor(a!) sums, Tensor(b!)? pooled) -> ()");
  m.def("merged_head_sums(Tensor q, Tensor k, Tensor lse, Tensor heads, Tensor groups, "
        "int row0, int rows, bool causal, int window, Tensor? key_mask, float scale, "
        "Tensor? pair_ptr, Tensor? pair_key, int pool_block, Tensor(a!) sums, "
        "Tensor(b!)? pooled) -> ()");
  m.def("attention_head_sums(Tensor q, Tensor k, Tensor v, Tensor groups, bool causal, "
        "float scale, Tensor? pair_ptr, Tensor? pair_key, int pool_block, Tensor(a!) out, "
        "Tensor(b!) lse, Tensor(c!) sums, Tensor(d!)? pooled) -> ()");
}

TORCH_LIBRARY_IMPL(attnlab_kernel, CPU, m) {
  m.impl("forward", &forward);
  m.impl("backward", &backward);
  m.impl("exp_rows", &exp_rows);
  m.impl("head_sums", &head_sums);
  m.impl("merged_head_sums", &merged_head_sums);
  m.impl("attention_head_sums", &attention_head_sums);
}
