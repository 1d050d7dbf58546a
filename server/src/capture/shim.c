/* kernel-lsp CUDA capture shim (issue #32; docs/spec.md, "Specs from a program's own
 * launches"). Compiled at capture time with the system `cc` into a temporary folder and
 * put in the child's LD_PRELOAD; nothing is installed. It interposes the runtime API's
 * launch entry points (cudaLaunchKernel, cudaLaunchCooperativeKernel, cudaLaunchKernelExC
 * and their _ptsz variants,
 * and __cudaLaunchKernel, which `<<<...>>>` compiles to from CUDA 13 on: it takes the
 * kernel's handle, a CUkernel, instead of the host stub) and, for kernels whose name is in KERNEL_LSP_CAPTURE_CUDA_NAMES (the project's own),
 * writes one JSON line per distinct launch to KERNEL_LSP_CAPTURE_OUT: the mangled name,
 * grid, block, dynamic shared memory, every parameter's bytes (offsets and sizes from the
 * driver's cuFuncGetParamInfo) and, for a parameter that points into a device
 * allocation, the allocation's size, the pointer's offset, and what the launch did to
 * it: the launch is replayed on the same inputs (the result must not change) and once
 * more with the written allocations poisoned (to tell `out` from `inout`); the memory is
 * then put back as the first launch left it. Runtime and driver functions are looked up
 * with dlsym in the libraries the program already loaded; nothing is linked. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct { unsigned x, y, z; } kl_dim3;
typedef int kl_err;
typedef struct {
  kl_dim3 grid, block;
  size_t smem;
  void *stream;
  void *attrs;
  unsigned num_attrs;
} kl_config;

typedef kl_err (*launch_fn)(const void *, kl_dim3, kl_dim3, void **, size_t, void *);
typedef kl_err (*launch_ex_fn)(const kl_config *, const void *, void **);
typedef kl_err (*malloc_fn)(void **, size_t);

#define KL_MAX_PARAMS 64
#define KL_MAX_KERNELS 256
#define KL_MAX_KEYS 4096

static pthread_mutex_t kl_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int kl_inside;
static void *kl_rt, *kl_drv;
static struct { char name[256]; unsigned long launches; int cases, in_graph; } kl_kernels[KL_MAX_KERNELS];
static int kl_nkernels;
static unsigned long long kl_keys[KL_MAX_KEYS];
static int kl_nkeys;
static struct { uintptr_t base; size_t size; } kl_allocs[65536];

/* The first loaded library whose path contains `part`, opened without loading it again. */
static const char *kl_want;
static char kl_found[4096];
static int kl_find_cb(struct dl_phdr_info *info, size_t sz, void *data) {
  (void)sz; (void)data;
  if (info->dlpi_name && strstr(info->dlpi_name, kl_want)) {
    snprintf(kl_found, sizeof kl_found, "%s", info->dlpi_name);
    return 1;
  }
  return 0;
}
static void *kl_loaded(const char *part) {
  kl_want = part;
  kl_found[0] = 0;
  dl_iterate_phdr(kl_find_cb, NULL);
  return kl_found[0] ? dlopen(kl_found, RTLD_NOW | RTLD_NOLOAD) : NULL;
}

/* A runtime function: the next definition after this shim, else libcudart's. */
static void *kl_rt_sym(const char *name) {
  void *f = dlsym(RTLD_NEXT, name);
  if (f) return f;
  if (!kl_rt) kl_rt = kl_loaded("libcudart");
  return kl_rt ? dlsym(kl_rt, name) : NULL;
}
/* A driver function: libcuda's, else one the program defines (a stand-in runtime). */
static void *kl_drv_sym(const char *name) {
  if (!kl_drv) kl_drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!kl_drv) kl_drv = dlopen("libcuda.so.1", RTLD_NOW);
  void *f = kl_drv ? dlsym(kl_drv, name) : NULL;
  return f ? f : dlsym(RTLD_DEFAULT, name);
}

static unsigned long long kl_hash(unsigned long long h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ULL;
  return h;
}

/* The unqualified name of an Itanium-mangled function (`_ZN2ns3fooEPf` -> `foo`), or the
 * name itself when it is not mangled. Enough to match against the project's names. */
static void kl_base_name(const char *m, char *out, size_t cap) {
  snprintf(out, cap, "%s", m);
  if (strncmp(m, "_Z", 2) != 0) return;
  const char *p = m + 2;
  int nested = *p == 'N';
  if (nested) p++;
  while (*p == 'L' || *p == 'K' || *p == 'V') p++;
  const char *last = NULL; int len = 0;
  while (*p >= '0' && *p <= '9') {
    int n = (int)strtol(p, (char **)&p, 10);
    last = p; len = n;
    if ((size_t)n > strlen(p)) return;
    p += n;
    if (!nested) break;
    while (*p == 'I') { /* template arguments: skip to the matching E */
      int depth = 0;
      do { if (*p == 'I') depth++; else if (*p == 'E') depth--; p++; } while (depth > 0 && *p);
    }
  }
  if (last && (size_t)len < cap) { memcpy(out, last, len); out[len] = 0; }
}

static int kl_wanted(const char *base) {
  const char *names = getenv("KERNEL_LSP_CAPTURE_CUDA_NAMES");
  if (!names) return 0;
  size_t n = strlen(base);
  for (const char *p = names; *p;) {
    const char *e = strchr(p, ',');
    size_t l = e ? (size_t)(e - p) : strlen(p);
    if (l == n && strncmp(p, base, n) == 0) return 1;
    if (!e) break;
    p = e + 1;
  }
  return 0;
}

static int kl_kernel_slot(const char *name) {
  for (int i = 0; i < kl_nkernels; i++)
    if (strcmp(kl_kernels[i].name, name) == 0) return i;
  if (kl_nkernels == KL_MAX_KERNELS) return -1;
  snprintf(kl_kernels[kl_nkernels].name, sizeof kl_kernels[0].name, "%s", name);
  return kl_nkernels++;
}

static void kl_emit(const char *line) {
  const char *path = getenv("KERNEL_LSP_CAPTURE_OUT");
  if (!path) return;
  int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
  if (fd < 0) return;
  ssize_t w = write(fd, line, strlen(line));
  (void)w;
  close(fd);
}

static void kl_summary(void) {
  size_t cap = 64 + (size_t)kl_nkernels * 320;
  char *s = malloc(cap);
  if (!s) return;
  size_t n = snprintf(s, cap, "{\"cuda_summary\":[");
  for (int i = 0; i < kl_nkernels; i++)
    n += snprintf(s + n, cap - n, "%s{\"kernel\":\"%s\",\"launches\":%lu}", i ? "," : "",
                  kl_kernels[i].name, kl_kernels[i].launches);
  snprintf(s + n, cap - n, "],\"pid\":%d}\n", (int)getpid());
  kl_emit(s);
  free(s);
}

/* Exact sizes of the allocations the program made, where cudaMalloc was seen. */
kl_err cudaMalloc(void **ptr, size_t size) {
  static malloc_fn real;
  if (!real) real = (malloc_fn)kl_rt_sym("cudaMalloc");
  if (!real) return 1;
  kl_err e = real(ptr, size);
  if (e == 0 && *ptr) {
    size_t h = ((uintptr_t)*ptr >> 8) % 65536;
    for (int i = 0; i < 65536; i++, h = (h + 1) % 65536)
      if (kl_allocs[h].base == 0 || kl_allocs[h].base == (uintptr_t)*ptr) {
        kl_allocs[h].base = (uintptr_t)*ptr;
        kl_allocs[h].size = size;
        break;
      }
  }
  return e;
}

static size_t kl_malloc_size(uintptr_t base) {
  size_t h = (base >> 8) % 65536;
  for (int i = 0; i < 65536 && kl_allocs[h].base; i++, h = (h + 1) % 65536)
    if (kl_allocs[h].base == base) return kl_allocs[h].size;
  return 0;
}

typedef struct {
  size_t offset, size;
  unsigned char bytes[16];
  int alloc; /* index into the launch's allocations, or -1 */
} kl_param;

typedef struct {
  uintptr_t base;
  size_t size, range_size;
  unsigned char *before, *after;
  int written, read;
  char ranges[640]; /* JSON members: the values' range read as each element type */
} kl_alloc;

static float kl_half(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0 ? m / 16777216.0f : e == 31 ? (m ? NAN : INFINITY) : (1024 + m) * ldexpf(1.0f, e - 25);
  return h & 0x8000 ? -v : v;
}
static float kl_bf16(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* The smallest and largest finite value of the first bytes of `p` read as `type`
 * (element `size` bytes), appended to `out` as `"type":[lo,hi]`. */
static void kl_range(const unsigned char *p, size_t n, const char *type, size_t size, char *out,
                     size_t cap) {
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i + size <= n; i += size) {
    double v;
    if (!strcmp(type, "f32")) { float f; memcpy(&f, p + i, 4); v = f; }
    else if (!strcmp(type, "f64")) memcpy(&v, p + i, 8);
    else if (!strcmp(type, "f16") || !strcmp(type, "bf16")) {
      uint16_t h; memcpy(&h, p + i, 2); v = type[0] == 'f' ? kl_half(h) : kl_bf16(h);
    }
    else if (!strcmp(type, "i32")) { int32_t x; memcpy(&x, p + i, 4); v = x; }
    else if (!strcmp(type, "u32")) { uint32_t x; memcpy(&x, p + i, 4); v = x; }
    else if (!strcmp(type, "i64")) { int64_t x; memcpy(&x, p + i, 8); v = (double)x; }
    else if (!strcmp(type, "i16")) { int16_t x; memcpy(&x, p + i, 2); v = x; }
    else if (!strcmp(type, "i8")) v = (int8_t)p[i];
    else v = p[i];
    if (isfinite(v)) { if (v < lo) lo = v; if (v > hi) hi = v; }
  }
  size_t used = strlen(out);
  if (lo <= hi)
    snprintf(out + used, cap - used, "%s\"%s\":[%.9g,%.9g]", used ? "," : "", type, lo, hi);
}

/* Ranges of an allocation's values before the launch, for the spec's input distributions
 * (at most its first 16 MiB are read). */
static void kl_ranges(kl_alloc *A) {
  static const char *types[] = {"f32", "f64", "f16", "bf16", "i32", "u32", "i64", "i16", "i8", "u8"};
  static const size_t sizes[] = {4, 8, 2, 2, 4, 4, 8, 2, 1, 1};
  size_t n = A->size < (16u << 20) ? A->size : (16u << 20);
  A->ranges[0] = 0;
  for (int t = 0; t < 10; t++) kl_range(A->before, n, types[t], sizes[t], A->ranges, sizeof A->ranges);
}

typedef struct {
  kl_param params[KL_MAX_PARAMS];
  int nparams;
  kl_alloc allocs[KL_MAX_PARAMS];
  int nallocs;
} kl_launch;

/* Parameter offsets and sizes come from the driver: cuKernelGetParamInfo for a kernel
 * handle (`handle`), else cuFuncGetParamInfo for the function of the host stub. */
static int kl_params(const void *func, int handle, void **args, kl_launch *L, const char **why) {
  typedef kl_err (*by_symbol_fn)(void **, const void *);
  typedef int (*param_info_fn)(void *, size_t, size_t *, size_t *);
  typedef int (*range_fn)(uintptr_t *, size_t *, uintptr_t);
  by_symbol_fn by_symbol = (by_symbol_fn)kl_rt_sym("cudaGetFuncBySymbol");
  param_info_fn info =
      (param_info_fn)kl_drv_sym(handle ? "cuKernelGetParamInfo" : "cuFuncGetParamInfo");
  range_fn range = (range_fn)kl_drv_sym("cuMemGetAddressRange_v2");
  void *cufunc = handle ? (void *)func : NULL;
  if (!info || !range || (!handle && (!by_symbol || by_symbol(&cufunc, func) != 0))) {
    *why = "the CUDA driver has no cuFuncGetParamInfo/cuKernelGetParamInfo (it needs CUDA 12.4 or newer)";
    return 0;
  }
  L->nparams = 0;
  L->nallocs = 0;
  for (size_t i = 0; i < KL_MAX_PARAMS; i++) {
    kl_param *p = &L->params[L->nparams];
    if (info(cufunc, i, &p->offset, &p->size) != 0) break;
    if (p->size > sizeof p->bytes) { *why = "a parameter is passed by value as a struct"; return 0; }
    memcpy(p->bytes, args[i], p->size);
    p->alloc = -1;
    uintptr_t v = 0, base = 0;
    size_t rsize = 0;
    if (p->size == 8) memcpy(&v, p->bytes, 8);
    if (v && range(&base, &rsize, v) == 0) {
      int a = 0;
      while (a < L->nallocs && L->allocs[a].base != base) a++;
      if (a == L->nallocs) {
        size_t exact = kl_malloc_size(base);
        L->allocs[a] = (kl_alloc){base, exact ? exact : rsize, rsize, NULL, NULL, 0, 0, {0}};
        L->nallocs++;
      }
      p->alloc = a;
    }
    L->nparams++;
  }
  return 1;
}

typedef kl_err (*memcpy_fn)(void *, const void *, size_t, int);
typedef kl_err (*memset_fn)(void *, int, size_t);
typedef kl_err (*sync_fn)(void);

/* Copies every allocation to `which` (0: before, 1: after) or back from it (dir 1). */
static int kl_copy(kl_launch *L, int which, int to_device, unsigned char **scratch) {
  static memcpy_fn cp;
  if (!cp) cp = (memcpy_fn)kl_rt_sym("cudaMemcpy");
  for (int a = 0; a < L->nallocs; a++) {
    kl_alloc *A = &L->allocs[a];
    unsigned char *host = scratch ? scratch[a] : (which ? A->after : A->before);
    int e = to_device ? cp((void *)A->base, host, A->size, 1) : cp(host, (void *)A->base, A->size, 2);
    if (e != 0) return 0;
  }
  return 1;
}

static char *kl_hex(const unsigned char *b, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) sprintf(out + 2 * i, "%02x", b[i]);
  out[2 * n] = 0;
  return out;
}

static void kl_write(const char *name, kl_dim3 g, kl_dim3 b, size_t smem, kl_launch *L,
                     const char *refused) {
  size_t cap = 1024 + (size_t)L->nparams * 1024;
  char *s = malloc(cap), hex[40];
  if (!s) return;
  size_t n = snprintf(s, cap, "{\"cuda\":true,\"kernel\":\"%s\",\"grid\":[%u,%u,%u],"
                      "\"block\":[%u,%u,%u],\"smem\":%zu,", name, g.x, g.y, g.z, b.x, b.y, b.z, smem);
  if (refused) n += snprintf(s + n, cap - n, "\"refused\":\"%s\",", refused);
  n += snprintf(s + n, cap - n, "\"params\":[");
  for (int i = 0; i < L->nparams; i++) {
    kl_param *p = &L->params[i];
    n += snprintf(s + n, cap - n, "%s{\"offset\":%zu,\"size\":%zu,\"hex\":\"%s\"", i ? "," : "",
                  p->offset, p->size, kl_hex(p->bytes, p->size, hex));
    if (p->alloc >= 0) {
      kl_alloc *A = &L->allocs[p->alloc];
      uintptr_t v;
      memcpy(&v, p->bytes, 8);
      n += snprintf(s + n, cap - n, ",\"alloc\":{\"id\":%d,\"size\":%zu,\"range_size\":%zu,"
                    "\"offset\":%zu,\"written\":%s,\"read\":%s,\"ranges\":{%s}}", p->alloc,
                    A->size, A->range_size, (size_t)(v - A->base), A->written ? "true" : "false",
                    A->read ? "true" : "false", A->ranges);
    }
    n += snprintf(s + n, cap - n, "}");
  }
  snprintf(s + n, cap - n, "]}\n");
  kl_emit(s);
  free(s);
}

static void kl_free_all(kl_launch *L, unsigned char **scratch) {
  for (int a = 0; a < L->nallocs; a++) {
    free(L->allocs[a].before);
    free(L->allocs[a].after);
    free(scratch[a]);
  }
}

/* Launch, replay, poisoned replay; leaves memory as the first launch did. */
static kl_err kl_observe(kl_launch *L, kl_err (*go)(void *), void *ctx, const char **why) {
  sync_fn sync = (sync_fn)kl_rt_sym("cudaDeviceSynchronize");
  memset_fn mset = (memset_fn)kl_rt_sym("cudaMemset");
  unsigned char *scratch[KL_MAX_PARAMS] = {0};
  size_t total = 0, cap = 256u << 20;
  const char *c = getenv("KERNEL_LSP_CAPTURE_MAX_BYTES");
  if (c) cap = strtoull(c, NULL, 10);
  for (int a = 0; a < L->nallocs; a++) total += L->allocs[a].size;
  if (!sync || !mset || total > cap) {
    *why = total > cap ? "its buffers are larger than the capture's byte cap" : "no cudaMemset";
    return go(ctx);
  }
  for (int a = 0; a < L->nallocs; a++) {
    L->allocs[a].before = malloc(L->allocs[a].size + 1);
    L->allocs[a].after = malloc(L->allocs[a].size + 1);
    scratch[a] = malloc(L->allocs[a].size + 1);
    if (!L->allocs[a].before || !L->allocs[a].after || !scratch[a]) {
      *why = "out of host memory for the snapshots";
      kl_free_all(L, scratch);
      return go(ctx);
    }
  }
  sync();
  kl_copy(L, 0, 0, NULL);
  for (int a = 0; a < L->nallocs; a++) kl_ranges(&L->allocs[a]);
  kl_err e = go(ctx);
  if (e != 0 || sync() != 0) { kl_free_all(L, scratch); *why = "the launch failed"; return e; }
  kl_copy(L, 1, 0, NULL);
  for (int a = 0; a < L->nallocs; a++)
    L->allocs[a].written = memcmp(L->allocs[a].before, L->allocs[a].after, L->allocs[a].size) != 0;
  kl_copy(L, 0, 1, NULL);
  go(ctx);
  sync();
  kl_copy(L, 0, 0, scratch);
  for (int a = 0; a < L->nallocs; a++)
    if (memcmp(scratch[a], L->allocs[a].after, L->allocs[a].size) != 0)
      *why = "its result changed when replayed on the same inputs (it depends on state outside its arguments)";
  kl_copy(L, 0, 1, NULL);
  for (int a = 0; a < L->nallocs; a++)
    if (L->allocs[a].written) mset((void *)L->allocs[a].base, 0xff, L->allocs[a].size);
  go(ctx);
  sync();
  kl_copy(L, 0, 0, scratch);
  for (int a = 0; a < L->nallocs; a++)
    L->allocs[a].read = L->allocs[a].written &&
                        memcmp(scratch[a], L->allocs[a].after, L->allocs[a].size) != 0;
  kl_copy(L, 1, 1, NULL);
  sync();
  kl_free_all(L, scratch);
  return e;
}

static const char *kl_name(const void *func, int handle) {
  typedef kl_err (*name_fn)(const char **, const void *);
  typedef kl_err (*by_symbol_fn)(void **, const void *);
  typedef int (*drv_name_fn)(const char **, void *);
  static name_fn rt;
  static drv_name_fn drv, kernel_name;
  const char *name = NULL;
  if (handle) {
    if (!kernel_name) kernel_name = (drv_name_fn)kl_drv_sym("cuKernelGetName");
    return kernel_name && kernel_name(&name, (void *)func) == 0 ? name : NULL;
  }
  if (!rt) rt = (name_fn)kl_rt_sym("cudaFuncGetName");
  if (rt && rt(&name, func) == 0 && name) return name;
  by_symbol_fn by_symbol = (by_symbol_fn)kl_rt_sym("cudaGetFuncBySymbol");
  if (!drv) drv = (drv_name_fn)kl_drv_sym("cuFuncGetName");
  void *f = NULL;
  if (by_symbol && drv && by_symbol(&f, func) == 0 && drv(&name, f) == 0) return name;
  return NULL;
}

/* Whether `stream` is being captured into a CUDA graph: the launch does not run then, and
 * the shim's synchronizations would break the capture. */
static int kl_in_graph(void *stream) {
  typedef kl_err (*capturing_fn)(void *, int *);
  static capturing_fn capturing;
  if (!capturing) capturing = (capturing_fn)kl_rt_sym("cudaStreamIsCapturing");
  int status = 0;
  return capturing && (capturing(stream, &status) != 0 || status != 0);
}

/* The common path of every entry point: `go` launches as the program asked. */
static kl_err kl_launch_seen(const void *func, int handle, kl_dim3 g, kl_dim3 b, size_t smem,
                             void *stream, void **args, kl_err (*go)(void *), void *ctx) {
  if (kl_inside) return go(ctx);
  kl_inside = 1;
  pthread_mutex_lock(&kl_lock);
  static int registered;
  if (!registered) { registered = 1; atexit(kl_summary); }
  const char *name = kl_name(func, handle);
  char base[256];
  kl_err e;
  int slot = -1;
  if (name) {
    kl_base_name(name, base, sizeof base);
    if (kl_wanted(base)) slot = kl_kernel_slot(name);
  }
  if (slot < 0) { e = go(ctx); goto done; }
  kl_kernels[slot].launches++;
  static kl_launch L;
  if (kl_in_graph(stream)) {
    if (!kl_kernels[slot].in_graph++) {
      L.nparams = 0;
      kl_write(name, g, b, smem, &L, "it was launched while a CUDA graph was being captured (such a launch does not run then)");
    }
    e = go(ctx);
    goto done;
  }
  int max_cases = getenv("KERNEL_LSP_CAPTURE_MAX_CASES") ? atoi(getenv("KERNEL_LSP_CAPTURE_MAX_CASES")) : 4;
  const char *why = NULL;
  if (kl_kernels[slot].cases >= max_cases || !kl_params(func, handle, args, &L, &why)) {
    if (why && kl_kernels[slot].cases < max_cases) {
      kl_kernels[slot].cases++;
      L.nparams = 0;
      kl_write(name, g, b, smem, &L, why);
    }
    e = go(ctx);
    goto done;
  }
  unsigned long long key = kl_hash(1469598103934665603ULL, name, strlen(name));
  key = kl_hash(key, &g, sizeof g);
  key = kl_hash(key, &b, sizeof b);
  key = kl_hash(key, &smem, sizeof smem);
  for (int i = 0; i < L.nparams; i++) {
    kl_param *p = &L.params[i];
    if (p->alloc >= 0) {
      uintptr_t v;
      memcpy(&v, p->bytes, 8);
      size_t off = v - L.allocs[p->alloc].base;
      key = kl_hash(key, &L.allocs[p->alloc].size, sizeof(size_t));
      key = kl_hash(key, &off, sizeof off);
    } else {
      key = kl_hash(key, p->bytes, p->size);
    }
  }
  for (int i = 0; i < kl_nkeys; i++)
    if (kl_keys[i] == key) { e = go(ctx); goto done; }
  if (kl_nkeys < KL_MAX_KEYS) kl_keys[kl_nkeys++] = key;
  kl_kernels[slot].cases++;
  e = kl_observe(&L, go, ctx, &why);
  kl_write(name, g, b, smem, &L, why);
done:
  pthread_mutex_unlock(&kl_lock);
  kl_inside = 0;
  return e;
}

typedef struct {
  launch_fn f;
  const void *func;
  kl_dim3 g, b;
  void **args;
  size_t smem;
  void *stream;
} kl_plain;
static kl_err kl_go_plain(void *c) {
  kl_plain *p = c;
  return p->f(p->func, p->g, p->b, p->args, p->smem, p->stream);
}
typedef struct {
  launch_ex_fn f;
  const kl_config *cfg;
  const void *func;
  void **args;
} kl_ex;
static kl_err kl_go_ex(void *c) {
  kl_ex *p = c;
  return p->f(p->cfg, p->func, p->args);
}

#define KL_PLAIN(NAME, HANDLE)                                                           \
  kl_err NAME(const void *func, kl_dim3 g, kl_dim3 b, void **args, size_t smem, void *s) { \
    static launch_fn real;                                                               \
    if (!real) real = (launch_fn)kl_rt_sym(#NAME);                                       \
    if (!real) return 98;                                                                \
    kl_plain c = {real, func, g, b, args, smem, s};                                      \
    return kl_launch_seen(func, HANDLE, g, b, smem, s, args, kl_go_plain, &c);           \
  }
#define KL_EX(NAME)                                                                      \
  kl_err NAME(const kl_config *cfg, const void *func, void **args) {                     \
    static launch_ex_fn real;                                                            \
    if (!real) real = (launch_ex_fn)kl_rt_sym(#NAME);                                    \
    if (!real) return 98;                                                                \
    kl_ex c = {real, cfg, func, args};                                                   \
    return kl_launch_seen(func, 0, cfg->grid, cfg->block, cfg->smem, cfg->stream, args,  \
                          kl_go_ex, &c);                                                 \
  }

KL_PLAIN(cudaLaunchKernel, 0)
KL_PLAIN(cudaLaunchKernel_ptsz, 0)
KL_PLAIN(cudaLaunchCooperativeKernel, 0)
KL_PLAIN(cudaLaunchCooperativeKernel_ptsz, 0)
KL_PLAIN(__cudaLaunchKernel, 1)
KL_PLAIN(__cudaLaunchKernel_ptsz, 1)
KL_EX(cudaLaunchKernelExC)
KL_EX(cudaLaunchKernelExC_ptsz)
