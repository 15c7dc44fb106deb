/* The lezero native runtime: runs one compiled model without Python.
 *
 * lezero-compile (lezero/runtime/native/build.py) builds one translation unit from this file and two
 * generated headers: lz_model_api.h (the public C API, also installed as <name>.h) and
 * lz_model_tables.h (the schedule: tensors, kernels, buffer references, output sources).  It is
 * linked with an object file holding every kernel (LLVM, kernel ABI
 * `void name(void **buffers, int64_t begin, int64_t end)`, buffers = operands then results) and
 * the weights (`lz_weights`, embedded by an assembly file's .incbin).
 *
 * Running the model does what lezero/runtime/cpu.py's run_plan does with a native plan: the
 * schedule is a loop program (lezero/runtime/loop_driver.py: kernel launches with inline pointer
 * tables, lz.for / lz.while / lz.if with their regions, copies), walked by lz_run_program, the same
 * walker the JIT runs, linked beside the kernels. lz_model_create copies the program and relocates
 * its addresses (a kernel's symbol, the model's arena, the weights, the status array) and sets each
 * launch's thread count; a run writes the inputs' and outputs' addresses into the program's first
 * frame words and makes one call, which splits launches over a pthread pool when they have enough
 * work; finally it copies the outputs no kernel wrote in place.
 *
 * A kernel with bounds checks (lezero/codegen/index_checks.py) also gets its slice of the model's
 * status array; after the run each check's flag is read, and one that is set makes the run fail
 * with the check's message around the bad index (the status is then reset). An lz.while that runs
 * past its max_trip_count fails the run with the interpreter's message.
 *
 * With LZ_EXECUTABLE defined it also has a main(): .npy files in, .npy files out.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lz_model_api.h"

typedef void (*lz_kernel_fn)(void **buffers, int64_t begin, int64_t end);

#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
/* Kernels compiled for a CPU with AMX use its tiles, and Linux gives a process the tile state only
 * after it asks (lezero/codegen/llvm/amx.py). Asked once when the program or library is loaded;
 * a refusal (an old kernel, no AMX) is harmless for kernels without tiles. */
__attribute__((constructor)) static void lz_request_amx_tiles(void) {
    syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */);
}
#endif

/* Where a copied output lives. */
enum { LZ_FROM_INPUT, LZ_FROM_OUTPUT, LZ_FROM_ARENA, LZ_FROM_WEIGHTS };

typedef struct {
    int kind;      /* LZ_FROM_* */
    int64_t where; /* input or output index, byte offset into the arena or the weights */
} lz_buffer_ref;

/* A program word holding an address: a kernel (its value indexes lz_kernel_fns) or a byte offset
 * into the model's arena, the weights or the status array. */
enum { LZ_RELOCATE_KERNEL, LZ_RELOCATE_ARENA, LZ_RELOCATE_WEIGHTS, LZ_RELOCATE_STATUS };

typedef struct {
    int64_t word;
    int kind; /* LZ_RELOCATE_* */
} lz_relocation;

/* A KERNEL entry of the program's code: [KERNEL, size, fn, work, threads, patches, (slot, word) *
 * patches, table...] (lezero/runtime/loop_driver.py). */
typedef struct {
    const char *name;
    int64_t code_at;  /* the entry's position in the code */
    int64_t work_items;
    int parallel;    /* worth splitting over the thread pool */
    int first_check; /* into lz_index_checks */
    int num_checks;
    int64_t flops; /* codegen's estimate, and the bytes the kernel reads and writes: --profile's rates */
    int64_t bytes;
} lz_launch;

typedef struct {
    int64_t code_at; /* an lz.while's WHILE entry */
    const char *message;
} lz_while_error;

typedef void (*lz_pool_entry_fn)(void *pool, void *fn, void *table, int64_t work_items, int64_t threads);

/* lezero/runtime/loop_driver.py's walker: runs code[start, end) over frame; 0, or the position + 1
 * of an lz.while that ran past its max_trip_count. always: every launch through pool_entry. */
extern int64_t lz_run_program(int64_t *code, int64_t start, int64_t end, int64_t *frame, void *pool,
                              lz_pool_entry_fn pool_entry, int64_t always) __attribute__((visibility("hidden")));

/* A bounds check: its flag at status[slot], the largest bad index at status[slot + 1]. */
typedef struct {
    int64_t slot;
    const char *before, *after; /* the error message: before, the index, after */
} lz_index_check;

typedef struct {
    int written_by_kernel; /* a kernel writes it straight into the output buffer */
    lz_buffer_ref source;  /* otherwise copied from here after the last kernel */
} lz_output_source;

extern const unsigned char lz_weights[] __attribute__((visibility("hidden")));

/* LZ_NUM_INPUTS, LZ_NUM_OUTPUTS, LZ_NUM_LAUNCHES, LZ_ARENA_SIZE, LZ_ANY_PARALLEL, LZ_STATUS_SIZE,
 * LZ_FRAME_WORDS, LZ_PROGRAM_WORDS, LZ_NUM_RELOCATIONS, the kernels' declarations, lz_inputs[],
 * lz_outputs[], lz_output_files[], lz_kernel_fns[], lz_program_words[], lz_relocations[],
 * lz_launches[], lz_index_checks[], lz_status_initial[], lz_while_errors[], lz_output_sources[]. */
#include "lz_model_tables.h"

#define LZ_ALIGNMENT 64
#define LZ_ERROR_SIZE 1024

static size_t lz_round_up(size_t n) { return (n + LZ_ALIGNMENT - 1) / LZ_ALIGNMENT * LZ_ALIGNMENT; }

/* ---------------------------------------------------------------------------------------------
 * dtypes
 * ------------------------------------------------------------------------------------------- */

typedef struct {
    const char *name;  /* numpy's name */
    const char *descr; /* .npy descr (bfloat16 is stored as float32, as the reference does) */
    size_t size;
} lz_dtype_info;

static const lz_dtype_info lz_dtypes[] = {
    [LZ_FLOAT32] = {"float32", "<f4", 4}, [LZ_FLOAT64] = {"float64", "<f8", 8},
    [LZ_FLOAT16] = {"float16", "<f2", 2}, [LZ_BFLOAT16] = {"bfloat16 (stored as float32)", "<f4", 4},
    [LZ_BOOL] = {"bool", "|b1", 1},       [LZ_INT8] = {"int8", "|i1", 1},
    [LZ_INT16] = {"int16", "<i2", 2},     [LZ_INT32] = {"int32", "<i4", 4},
    [LZ_INT64] = {"int64", "<i8", 8},     [LZ_UINT8] = {"uint8", "|u1", 1},
};

static int lz_dtype_valid(lz_dtype d) { return d >= LZ_FLOAT32 && d <= LZ_UINT8; }

const char *lz_dtype_name(lz_dtype dtype) { return lz_dtype_valid(dtype) ? lz_dtypes[dtype].name : "unknown"; }

size_t lz_dtype_size(lz_dtype dtype) { return lz_dtype_valid(dtype) ? lz_dtypes[dtype].size : 0; }

/* ---------------------------------------------------------------------------------------------
 * The thread pool: workers 1..n-1 wait for a kernel; the caller runs share 0 and waits for all.
 * ------------------------------------------------------------------------------------------- */

typedef struct lz_pool lz_pool;

typedef struct {
    lz_pool *pool;
    int index;
} lz_worker;

struct lz_pool {
    int num_threads; /* the caller included */
    pthread_t *threads;
    lz_worker *workers;
    int started; /* workers actually running */
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    unsigned long generation;
    int remaining;
    int stop;
    lz_kernel_fn fn;
    void **buffers;
    int64_t work_items;
    int active; /* threads taking part in this kernel */
};

static void lz_run_share(lz_kernel_fn fn, void **buffers, int64_t work_items, int index, int active) {
    if (index >= active) return;
    int64_t begin = work_items * index / active, end = work_items * (index + 1) / active;
    if (begin < end) fn(buffers, begin, end);
}

static void *lz_worker_main(void *arg) {
    lz_worker *w = arg;
    lz_pool *p = w->pool;
    unsigned long seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (p->generation == seen && !p->stop) pthread_cond_wait(&p->wake, &p->lock);
        if (p->stop) break;
        seen = p->generation;
        lz_kernel_fn fn = p->fn;
        void **buffers = p->buffers;
        int64_t work_items = p->work_items;
        int active = p->active;
        pthread_mutex_unlock(&p->lock);
        lz_run_share(fn, buffers, work_items, w->index, active);
        pthread_mutex_lock(&p->lock);
        if (--p->remaining == 0) pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static void lz_pool_stop(lz_pool *p) {
    if (p->started > 0) {
        pthread_mutex_lock(&p->lock);
        p->stop = 1;
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->lock);
        for (int i = 0; i < p->started; i++) pthread_join(p->threads[i], NULL);
    }
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    free(p->threads);
    free(p->workers);
}

/* Start num_threads - 1 workers; fewer when the system refuses threads (then the pool is smaller). */
static void lz_pool_start(lz_pool *p, int num_threads) {
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->num_threads = 1;
    if (num_threads <= 1) return;
    p->threads = calloc((size_t)num_threads, sizeof *p->threads);
    p->workers = calloc((size_t)num_threads, sizeof *p->workers);
    if (!p->threads || !p->workers) return;
    for (int i = 1; i < num_threads; i++) {
        p->workers[i - 1] = (lz_worker){p, i};
        if (pthread_create(&p->threads[i - 1], NULL, lz_worker_main, &p->workers[i - 1]) != 0) break;
        p->started++;
    }
    p->num_threads = 1 + p->started;
}

static void lz_pool_run(lz_pool *p, lz_kernel_fn fn, void **buffers, int64_t work_items) {
    int active = p->num_threads < work_items ? p->num_threads : (int)work_items;
    if (active <= 1) {
        fn(buffers, 0, work_items);
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->buffers = buffers;
    p->work_items = work_items;
    p->active = active;
    p->remaining = p->started;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    lz_run_share(fn, buffers, work_items, 0, active);
    pthread_mutex_lock(&p->lock);
    while (p->remaining > 0) pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
}

/* The walker's entry into the pool (ThreadPool.native_entry's signature in the JIT). */
static void lz_pool_entry(void *pool, void *fn, void *table, int64_t work_items, int64_t threads) {
    (void)threads; /* the launch's min(threads, work items): lz_pool_run takes the same */
    lz_pool_run(pool, (lz_kernel_fn)fn, table, work_items);
}

static int lz_default_num_threads(void) {
    const char *env = getenv("LEZERO_NUM_THREADS");
    if (env && *env) {
        int n = atoi(env);
        if (n > 0) return n;
    }
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* ---------------------------------------------------------------------------------------------
 * The model
 * ------------------------------------------------------------------------------------------- */

struct lz_model {
    int64_t *program;       /* lz_program_words, relocated: its kernel tables are this model's */
    unsigned char *arena;   /* kernel results (memory-plan's offsets), regions' arenas, loop buffers */
    unsigned char *scratch; /* outputs the caller did not ask for */
    int64_t status[LZ_STATUS_SIZE + 1]; /* the bounds checks' flags and bad indices */
    lz_pool pool;
    pthread_mutex_t lock; /* the arena is shared state: one run at a time */
    char error[LZ_ERROR_SIZE];
    double *launch_seconds; /* --profile: each launch's time summed over the runs (NULL: not timed) */
    int64_t launch_calls;   /* --profile: the launches run (a loop body's once per iteration) */
    void **tables;          /* --profile: each launch's pointer table, to find it from the walker's call */
};

static double lz_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static __thread char lz_create_error[LZ_ERROR_SIZE];

static void lz_set_error(char *buffer, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(buffer, LZ_ERROR_SIZE, format, args);
    va_end(args);
}

static void *lz_aligned_alloc(size_t size) {
    void *p = NULL;
    return posix_memalign(&p, LZ_ALIGNMENT, lz_round_up(size ? size : 1)) == 0 ? p : NULL;
}

int lz_model_num_inputs(void) { return LZ_NUM_INPUTS; }

int lz_model_num_outputs(void) { return LZ_NUM_OUTPUTS; }

const lz_tensor_desc *lz_model_input(int index) {
    return index >= 0 && index < LZ_NUM_INPUTS ? &lz_inputs[index] : NULL;
}

const lz_tensor_desc *lz_model_output(int index) {
    return index >= 0 && index < LZ_NUM_OUTPUTS ? &lz_outputs[index] : NULL;
}

static int lz_find(const lz_tensor_desc *descs, int count, const char *name) {
    if (!name) return -1;
    for (int i = 0; i < count; i++)
        if (strcmp(descs[i].name, name) == 0) return i;
    return -1;
}

int lz_model_input_index(const char *name) { return lz_find(lz_inputs, LZ_NUM_INPUTS, name); }

int lz_model_output_index(const char *name) { return lz_find(lz_outputs, LZ_NUM_OUTPUTS, name); }

lz_model *lz_model_create(int num_threads) {
    lz_model *m = calloc(1, sizeof *m);
    if (!m) {
        lz_set_error(lz_create_error, "out of memory");
        return NULL;
    }
    size_t scratch = 0;
    for (int i = 0; i < LZ_NUM_OUTPUTS; i++) scratch += lz_round_up(lz_outputs[i].nbytes);
    m->arena = lz_aligned_alloc(LZ_ARENA_SIZE);
    m->scratch = lz_aligned_alloc(scratch);
    m->program = malloc(sizeof lz_program_words);
    if (!m->arena || !m->scratch || !m->program) {
        lz_set_error(lz_create_error, "cannot allocate %zu bytes for the model's buffers",
                     (size_t)LZ_ARENA_SIZE + scratch + sizeof lz_program_words);
        free(m->arena);
        free(m->scratch);
        free(m->program);
        free(m);
        return NULL;
    }
    memcpy(m->status, lz_status_initial, sizeof(int64_t) * LZ_STATUS_SIZE);
    memcpy(m->program, lz_program_words, sizeof lz_program_words);
    for (int r = 0; r < LZ_NUM_RELOCATIONS; r++) {
        int64_t *word = &m->program[lz_relocations[r].word];
        switch (lz_relocations[r].kind) {
        case LZ_RELOCATE_KERNEL: *word = (int64_t)(intptr_t)lz_kernel_fns[*word]; break;
        case LZ_RELOCATE_ARENA: *word += (int64_t)(intptr_t)m->arena; break;
        case LZ_RELOCATE_WEIGHTS: *word += (int64_t)(intptr_t)lz_weights; break;
        default: *word += (int64_t)(intptr_t)m->status; break;
        }
    }
    if (num_threads <= 0) num_threads = lz_default_num_threads();
    lz_pool_start(&m->pool, LZ_ANY_PARALLEL ? num_threads : 1);
    for (int k = 0; k < LZ_NUM_LAUNCHES; k++) { /* each launch's threads word */
        const lz_launch *l = &lz_launches[k];
        int64_t threads = m->pool.num_threads < l->work_items ? m->pool.num_threads : l->work_items;
        m->program[LZ_FRAME_WORDS + l->code_at + 4] = l->parallel ? threads : 1;
    }
    pthread_mutex_init(&m->lock, NULL);
    return m;
}

void lz_model_destroy(lz_model *model) {
    if (!model) return;
    lz_pool_stop(&model->pool);
    pthread_mutex_destroy(&model->lock);
    free(model->arena);
    free(model->scratch);
    free(model->program);
    free(model->launch_seconds);
    free(model->tables);
    free(model);
}

int lz_model_num_threads(const lz_model *model) { return model ? model->pool.num_threads : 0; }

const char *lz_model_last_error(const lz_model *model) { return model ? model->error : lz_create_error; }

static int lz_misaligned(const void *p, lz_dtype dtype) {
    return ((uintptr_t)p % lz_dtype_size(dtype)) != 0;
}

/* Map the caller's named (or, with names NULL, positional) buffers to tensor indices. */
static int lz_bind(lz_model *m, const char *what, const lz_tensor_desc *descs, int count,
                   const char *const *names, const void *const *buffers, int n, const void **bound, int required) {
    if (n < 0 || n > count || (required && n != count && !names)) {
        lz_set_error(m->error, "expected %s%d %s, got %d", required ? "" : "at most ", count, what, n);
        return -1;
    }
    for (int i = 0; i < count; i++) bound[i] = NULL;
    for (int k = 0; k < n; k++) {
        int i = k;
        if (names) {
            i = lz_find(descs, count, names[k]);
            if (i < 0) {
                char known[LZ_ERROR_SIZE / 2] = "";
                for (int j = 0; j < count; j++) {
                    size_t len = strlen(known);
                    snprintf(known + len, sizeof known - len, "%s'%s'", j ? ", " : "", descs[j].name);
                }
                lz_set_error(m->error, "unknown %.*s '%s' (the model's %s: %s)", (int)strlen(what) - 1, what,
                             names[k] ? names[k] : "(null)", what, known);
                return -1;
            }
            if (bound[i]) {
                lz_set_error(m->error, "%.*s '%s' is given twice", (int)strlen(what) - 1, what, descs[i].name);
                return -1;
            }
        }
        if (!buffers[k] && descs[i].nbytes) {
            lz_set_error(m->error, "%.*s '%s': the buffer is NULL", (int)strlen(what) - 1, what, descs[i].name);
            return -1;
        }
        if (buffers[k] && lz_misaligned(buffers[k], descs[i].dtype)) {
            lz_set_error(m->error, "%.*s '%s': the buffer is not aligned to its element size (%zu bytes)",
                         (int)strlen(what) - 1, what, descs[i].name, lz_dtype_size(descs[i].dtype));
            return -1;
        }
        bound[i] = buffers[k] ? buffers[k] : (const void *)lz_weights; /* any valid address for 0 bytes */
    }
    if (required)
        for (int i = 0; i < count; i++)
            if (!bound[i]) {
                lz_set_error(m->error, "missing %.*s '%s'", (int)strlen(what) - 1, what, descs[i].name);
                return -1;
            }
    return 0;
}

static void *lz_resolve(lz_model *m, lz_buffer_ref ref, const void **inputs, void **outputs) {
    switch (ref.kind) {
    case LZ_FROM_INPUT: return (void *)inputs[ref.where];
    case LZ_FROM_OUTPUT: return outputs[ref.where];
    case LZ_FROM_ARENA: return m->arena + ref.where;
    default: return (void *)(lz_weights + ref.where);
    }
}

/* --profile's entry: every launch comes here (the walker's `always`); it finds the launch by its
 * table (they are in code order) and times it. */
static void lz_profile_entry(void *model, void *fn, void *table, int64_t work_items, int64_t threads) {
    lz_model *m = model;
    int lo = 0, hi = LZ_NUM_LAUNCHES - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if ((char *)m->tables[mid] <= (char *)table) lo = mid; else hi = mid - 1;
    }
    double start = lz_now();
    if (threads > 1)
        lz_pool_run(&m->pool, (lz_kernel_fn)fn, table, work_items);
    else
        ((lz_kernel_fn)fn)(table, 0, work_items);
    m->launch_seconds[lo] += lz_now() - start;
    m->launch_calls++;
}

/* Start timing each launch (--profile). */
__attribute__((unused)) static int lz_model_profile(lz_model *m) {
    m->launch_seconds = calloc(LZ_NUM_LAUNCHES + 1, sizeof(double));
    m->tables = calloc(LZ_NUM_LAUNCHES + 1, sizeof(void *));
    if (!m->launch_seconds || !m->tables) return -1;
    for (int k = 0; k < LZ_NUM_LAUNCHES; k++) {
        int64_t *entry = m->program + LZ_FRAME_WORDS + lz_launches[k].code_at;
        m->tables[k] = entry + 6 + 2 * entry[5];
    }
    return 0;
}

int lz_model_run(lz_model *model, const char *const *input_names, const void *const *inputs, int n_inputs,
                 const char *const *output_names, void *const *outputs, int n_outputs) {
    if (!model) return -1;
    const void *in[LZ_NUM_INPUTS + 1];
    const void *out_given[LZ_NUM_OUTPUTS + 1];
    void *out[LZ_NUM_OUTPUTS + 1];
    if (n_inputs && !inputs) {
        lz_set_error(model->error, "inputs is NULL");
        return -1;
    }
    if (n_outputs && !outputs) {
        lz_set_error(model->error, "outputs is NULL");
        return -1;
    }
    if (lz_bind(model, "inputs", lz_inputs, LZ_NUM_INPUTS, input_names, inputs, n_inputs, in, 1) != 0) return -1;
    if (lz_bind(model, "outputs", lz_outputs, LZ_NUM_OUTPUTS, output_names, (const void *const *)outputs,
                n_outputs, out_given, 0) != 0)
        return -1;
    unsigned char *scratch = model->scratch;
    for (int i = 0; i < LZ_NUM_OUTPUTS; i++) {
        out[i] = out_given[i] ? (void *)out_given[i] : scratch;
        if (!out_given[i]) scratch += lz_round_up(lz_outputs[i].nbytes);
    }

    pthread_mutex_lock(&model->lock);
    for (int i = 0; i < LZ_NUM_INPUTS; i++) model->program[i] = (int64_t)(intptr_t)in[i];
    for (int i = 0; i < LZ_NUM_OUTPUTS; i++) model->program[LZ_NUM_INPUTS + i] = (int64_t)(intptr_t)out[i];
    int profiled = model->launch_seconds != NULL;
    int64_t failed = lz_run_program(model->program + LZ_FRAME_WORDS, 0, LZ_PROGRAM_WORDS - LZ_FRAME_WORDS,
                                    model->program, profiled ? (void *)model : (void *)&model->pool,
                                    profiled ? lz_profile_entry : lz_pool_entry, profiled);
    for (int c = 0; c < LZ_NUM_CHECKS; c++) { /* the first failed check, in launch order */
        const lz_index_check *check = &lz_index_checks[c];
        if (!model->status[check->slot]) continue;
        lz_set_error(model->error, "%s%lld%s", check->before, (long long)model->status[check->slot + 1],
                     check->after);
        memcpy(model->status, lz_status_initial, sizeof(int64_t) * LZ_STATUS_SIZE);
        pthread_mutex_unlock(&model->lock);
        return -1;
    }
    if (failed) {
        const lz_while_error *e = lz_while_errors;
        while (e->message && e->code_at != failed - 1) e++;
        lz_set_error(model->error, "%s", e->message ? e->message : "an lz.while ran past its max_trip_count");
        pthread_mutex_unlock(&model->lock);
        return -1;
    }
    for (int i = 0; i < LZ_NUM_OUTPUTS; i++) {
        const lz_output_source *s = &lz_output_sources[i];
        if (!s->written_by_kernel && lz_outputs[i].nbytes)
            memcpy(out[i], lz_resolve(model, s->source, in, out), lz_outputs[i].nbytes);
    }
    pthread_mutex_unlock(&model->lock);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * The executable: .npy in, .npy out
 * ------------------------------------------------------------------------------------------- */
#ifdef LZ_EXECUTABLE

static const char *lz_program = "model";

static void lz_fail(const char *format, ...) __attribute__((noreturn, format(printf, 1, 2)));

static void lz_fail(const char *format, ...) {
    va_list args;
    fprintf(stderr, "%s: error: ", lz_program);
    va_start(args, format);
    vfprintf(stderr, format, args);
    va_end(args);
    fputc('\n', stderr);
    exit(1);
}

static void lz_format_shape(char *buffer, size_t size, const int64_t *shape, int rank) {
    size_t len = 0;
    buffer[0] = 0;
    if (rank == 0) snprintf(buffer, size, "() (a scalar)");
    for (int i = 0; i < rank && len < size; i++) {
        snprintf(buffer + len, size - len, "%s%lld", i ? "x" : "", (long long)shape[i]);
        len = strlen(buffer);
    }
}

/* The numpy name of a .npy descr, for messages. */
static const char *lz_descr_name(const char *descr) {
    static const struct { const char *descr, *name; } names[] = {
        {"<f4", "float32"}, {"<f8", "float64"}, {"<f2", "float16"}, {"|b1", "bool"},    {"|i1", "int8"},
        {"<i2", "int16"},   {"<i4", "int32"},   {"<i8", "int64"},   {"|u1", "uint8"},   {"<u2", "uint16"},
        {"<u4", "uint32"},  {"<u8", "uint64"},  {"<c8", "complex64"}, {"<c16", "complex128"}, {"|O", "object"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(names[i].descr, descr) == 0) return names[i].name;
    return descr;
}

/* A field's value in the header dict: the text after 'key': (NULL when absent). */
static const char *lz_npy_field(const char *header, const char *key) {
    char quoted[32];
    for (int q = 0; q < 2; q++) {
        snprintf(quoted, sizeof quoted, q ? "\"%s\"" : "'%s'", key);
        const char *p = strstr(header, quoted);
        if (p) {
            p += strlen(quoted);
            while (*p == ' ') p++;
            if (*p != ':') return NULL;
            p++;
            while (*p == ' ') p++;
            return p;
        }
    }
    return NULL;
}

typedef struct {
    char descr[16];
    int fortran_order;
    int rank;
    int64_t shape[32];
    const unsigned char *data;
    size_t data_bytes;
} lz_npy_header;

/* Parse a .npy file held in memory; returns NULL or why it is not one. */
static const char *lz_npy_parse(const unsigned char *file, size_t size, lz_npy_header *h) {
    if (size < 10 || memcmp(file, "\x93NUMPY", 6) != 0) return "not a .npy file (no \\x93NUMPY magic)";
    int major = file[6];
    size_t header_len, start;
    if (major == 1) {
        header_len = file[8] | (size_t)file[9] << 8;
        start = 10;
    } else if (major == 2 || major == 3) {
        if (size < 12) return "the .npy header is truncated";
        header_len = file[8] | (size_t)file[9] << 8 | (size_t)file[10] << 16 | (size_t)file[11] << 24;
        start = 12;
    } else {
        return "unsupported .npy format version";
    }
    if (start + header_len > size) return "the .npy header is truncated";
    char *header = malloc(header_len + 1);
    if (!header) return "out of memory";
    memcpy(header, file + start, header_len);
    header[header_len] = 0;
    const char *why = NULL;
    const char *descr = lz_npy_field(header, "descr");
    const char *fortran = lz_npy_field(header, "fortran_order");
    const char *shape = lz_npy_field(header, "shape");
    if (!descr || !fortran || !shape || (*descr != '\'' && *descr != '"') || *shape != '(') {
        why = "malformed .npy header";
        goto done;
    }
    size_t n = 0;
    for (const char *p = descr + 1; *p && *p != *descr; p++)
        if (n + 1 < sizeof h->descr) h->descr[n++] = *p;
    h->descr[n] = 0;
    /* '=' is the native byte order; every target we build for is little-endian. */
    if (h->descr[0] == '=') h->descr[0] = '<';
    if (strlen(h->descr) == 3 && h->descr[2] == '1' && h->descr[0] == '<') h->descr[0] = '|';
    h->fortran_order = strncmp(fortran, "True", 4) == 0;
    h->rank = 0;
    const char *p = shape + 1;
    for (;;) {
        while (*p == ' ' || *p == ',') p++;
        if (*p == ')') break;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || h->rank >= 32) {
            why = "malformed .npy shape";
            goto done;
        }
        h->shape[h->rank++] = v;
        p = end;
        while (*p == 'L') p++; /* Python 2 longs */
    }
    h->data = file + start + header_len;
    h->data_bytes = size - start - header_len;
done:
    free(header);
    return why;
}

static unsigned char *lz_read_file(const char *path, size_t *size, const char *input) {
    FILE *f = fopen(path, "rb");
    if (!f) lz_fail("input '%s': cannot open '%s': %s", input, path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) lz_fail("input '%s': '%s' is not a regular file", input, path);
    unsigned char *data = malloc(st.st_size ? (size_t)st.st_size : 1);
    if (!data) lz_fail("input '%s': out of memory reading '%s'", input, path);
    if (fread(data, 1, (size_t)st.st_size, f) != (size_t)st.st_size) lz_fail("input '%s': cannot read '%s'", input, path);
    fclose(f);
    *size = (size_t)st.st_size;
    return data;
}

/* Load input `index` from `path`, checking dtype and shape; returns a 64-byte aligned C-order copy. */
static void *lz_load_input(int index, const char *path) {
    const lz_tensor_desc *d = &lz_inputs[index];
    size_t size;
    unsigned char *file = lz_read_file(path, &size, d->name);
    lz_npy_header h;
    const char *why = lz_npy_parse(file, size, &h);
    if (why) lz_fail("input '%s': '%s': %s", d->name, path, why);
    if (strcmp(h.descr, lz_dtypes[d->dtype].descr) != 0)
        lz_fail("input '%s': '%s' holds %s, the model takes %s", d->name, path, lz_descr_name(h.descr),
                lz_dtypes[d->dtype].name);
    int same = h.rank == d->rank;
    for (int i = 0; same && i < d->rank; i++) same = h.shape[i] == d->shape[i];
    if (!same) {
        char got[256], want[256];
        lz_format_shape(got, sizeof got, h.shape, h.rank);
        lz_format_shape(want, sizeof want, d->shape, d->rank);
        lz_fail("input '%s': '%s' has shape %s, the model takes %s", d->name, path, got, want);
    }
    if (h.data_bytes < d->nbytes)
        lz_fail("input '%s': '%s' is truncated (%zu bytes of data, %zu expected)", d->name, path, h.data_bytes,
                (size_t)d->nbytes);
    unsigned char *data = lz_aligned_alloc(d->nbytes);
    if (!data) lz_fail("input '%s': out of memory", d->name);
    size_t item = lz_dtypes[d->dtype].size;
    if (!h.fortran_order || d->rank <= 1) {
        memcpy(data, h.data, d->nbytes);
    } else { /* column-major: element (i0, ..., in) sits at i0 + s0 * (i1 + s1 * (...)) */
        size_t count = d->nbytes / item;
        int64_t index_[32] = {0};
        for (size_t c = 0; c < count; c++) {
            size_t f = 0;
            for (int a = d->rank - 1; a >= 0; a--) f = f * (size_t)d->shape[a] + (size_t)index_[a];
            memcpy(data + c * item, h.data + f * item, item);
            for (int a = d->rank - 1; a >= 0; a--) { /* next C-order index */
                if (++index_[a] < d->shape[a]) break;
                index_[a] = 0;
            }
        }
    }
    free(file);
    return data;
}

static void lz_write_output(int index, const char *dir, const void *data) {
    const lz_tensor_desc *d = &lz_outputs[index];
    char shape[512] = "";
    size_t len = 0;
    for (int i = 0; i < d->rank; i++) {
        snprintf(shape + len, sizeof shape - len, "%lld,%s", (long long)d->shape[i], i + 1 < d->rank ? " " : "");
        len = strlen(shape);
    }
    if (d->rank > 1) shape[len - 1] = 0; /* (2, 3) but (5,) */
    char header[1024];
    int n = snprintf(header, sizeof header, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                     lz_dtypes[d->dtype].descr, shape);
    int total = (10 + n + 1 + LZ_ALIGNMENT - 1) / LZ_ALIGNMENT * LZ_ALIGNMENT; /* data starts aligned */
    int header_len = total - 10;
    memset(header + n, ' ', (size_t)(header_len - n - 1));
    header[header_len - 1] = '\n';

    size_t path_size = strlen(dir) + strlen(lz_output_files[index]) + 64;
    char *path = malloc(path_size), *tmp = malloc(path_size);
    snprintf(path, path_size, "%s/%s.npy", dir, lz_output_files[index]);
    snprintf(tmp, path_size, "%s/.%s.npy.%ld.tmp", dir, lz_output_files[index], (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) lz_fail("output '%s': cannot write '%s': %s", d->name, tmp, strerror(errno));
    unsigned char prefix[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(header_len & 0xff),
                                (unsigned char)(header_len >> 8)};
    int ok = fwrite(prefix, 1, 10, f) == 10 && fwrite(header, 1, (size_t)header_len, f) == (size_t)header_len &&
             fwrite(data, 1, d->nbytes, f) == d->nbytes;
    ok = (fclose(f) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        lz_fail("output '%s': cannot write '%s': %s", d->name, path, strerror(e));
    }
    free(path);
    free(tmp);
}

static void lz_print_tensor(FILE *f, const lz_tensor_desc *d, const char *file) {
    char shape[256];
    lz_format_shape(shape, sizeof shape, d->shape, d->rank);
    fprintf(f, "  %s: %s %s", d->name, lz_dtypes[d->dtype].name, shape);
    if (file) fprintf(f, " -> %s.npy", file);
    fputc('\n', f);
}

static void lz_usage(FILE *f) {
    fprintf(f,
            "usage: %s --input NAME=FILE.npy [--input ...] --output-dir DIR [--threads N] [--repeat N] [--profile]\n"
            "       %s --info\n\n"
            "Runs the model compiled by lezero-compile; writes DIR/<output>.npy for each output.\n"
            "--threads N  threads (default: $LEZERO_NUM_THREADS, else the CPUs this process may use)\n"
            "--repeat N   run N times and report the time per run on stderr\n"
            "--profile    time each kernel launch; print a table on stderr (as lz.profiler's)\n"
            "--info       print the inputs and outputs\n",
            lz_program, lz_program);
}

static void lz_info(void) {
    printf("inputs:\n");
    for (int i = 0; i < LZ_NUM_INPUTS; i++) lz_print_tensor(stdout, &lz_inputs[i], NULL);
    printf("outputs:\n");
    for (int i = 0; i < LZ_NUM_OUTPUTS; i++) lz_print_tensor(stdout, &lz_outputs[i], lz_output_files[i]);
}

/* --profile's table: one row per kernel (identical kernels share a symbol, not a row), by total time,
 * with its share of the runs' wall time and its achieved rates (codegen's flop estimate, the bytes it
 * reads and writes once), as lz.profiler's key_averages() prints a compiled function's kernels. */
static const double *lz_sort_seconds; /* qsort's comparator reads the times from here */

static int lz_slower_first(const void *a, const void *b) {
    double x = lz_sort_seconds[*(const int *)a], y = lz_sort_seconds[*(const int *)b];
    return x < y ? 1 : x > y ? -1 : 0;
}

static void lz_print_profile(const double *seconds, int64_t calls, int runs, double wall) {
    int order[LZ_NUM_LAUNCHES + 1];
    double kernels = 0;
    for (int k = 0; k < LZ_NUM_LAUNCHES; k++) {
        order[k] = k;
        kernels += seconds[k];
    }
    lz_sort_seconds = seconds;
    qsort(order, LZ_NUM_LAUNCHES, sizeof order[0], lz_slower_first);
    fprintf(stderr, "%-48s %9s %7s %9s %9s %9s\n", "kernel", "ms/run", "share", "GFLOP/s", "GB/s", "threads");
    for (int j = 0; j < LZ_NUM_LAUNCHES; j++) {
        const lz_launch *l = &lz_launches[order[j]];
        double t = seconds[order[j]] / runs;
        fprintf(stderr, "%-48.48s %9.3f %6.1f%% %9.2f %9.2f %9s\n", l->name, 1e3 * t,
                wall > 0 ? 100.0 * seconds[order[j]] / wall : 0.0, t > 0 ? (double)l->flops / t * 1e-9 : 0.0,
                t > 0 ? (double)l->bytes / t * 1e-9 : 0.0, l->parallel ? "pool" : "caller");
    }
    fprintf(stderr, "%lld launches per run (%d kernels), %d runs: kernels %.3f ms/run of %.3f ms/run wall (%.1f%%)\n",
            (long long)(calls / runs), LZ_NUM_LAUNCHES, runs, 1e3 * kernels / runs, 1e3 * wall / runs, wall > 0 ? 100.0 * kernels / wall : 0.0);
}

static const char *lz_option_value(int argc, char **argv, int *i, const char *option) {
    size_t n = strlen(option);
    if (strncmp(argv[*i], option, n) == 0 && argv[*i][n] == '=') return argv[*i] + n + 1;
    if (*i + 1 >= argc) lz_fail("%s needs a value", option);
    return argv[++*i];
}

static int lz_positive(const char *option, const char *text) {
    char *end;
    long v = strtol(text, &end, 10);
    if (end == text || *end || v <= 0 || v > 1000000000) lz_fail("%s takes a positive integer, got '%s'", option, text);
    return (int)v;
}


int main(int argc, char **argv) {
    if (argc > 0 && argv[0]) {
        const char *slash = strrchr(argv[0], '/');
        lz_program = slash ? slash + 1 : argv[0];
    }
    const char *paths[LZ_NUM_INPUTS + 1] = {0};
    const char *output_dir = NULL;
    int threads = 0, repeat = 1, profile = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            lz_usage(stdout);
            return 0;
        } else if (strcmp(a, "--profile") == 0) {
            profile = 1;
        } else if (strcmp(a, "--info") == 0) {
            lz_info();
            return 0;
        } else if (strncmp(a, "--input", 7) == 0 && (a[7] == 0 || a[7] == '=')) {
            const char *v = lz_option_value(argc, argv, &i, "--input");
            const char *eq = strchr(v, '=');
            if (!eq) lz_fail("--input takes NAME=FILE.npy, got '%s'", v);
            char name[512];
            snprintf(name, sizeof name, "%.*s", (int)(eq - v), v);
            int index = lz_model_input_index(name);
            if (index < 0) {
                fprintf(stderr, "%s: error: unknown input '%s'; the model's inputs:\n", lz_program, name);
                for (int k = 0; k < LZ_NUM_INPUTS; k++) lz_print_tensor(stderr, &lz_inputs[k], NULL);
                return 1;
            }
            if (paths[index]) lz_fail("input '%s' is given twice", name);
            paths[index] = eq + 1;
        } else if (strncmp(a, "--output-dir", 12) == 0 && (a[12] == 0 || a[12] == '=')) {
            output_dir = lz_option_value(argc, argv, &i, "--output-dir");
        } else if (strncmp(a, "--threads", 9) == 0 && (a[9] == 0 || a[9] == '=')) {
            threads = lz_positive("--threads", lz_option_value(argc, argv, &i, "--threads"));
        } else if (strncmp(a, "--repeat", 8) == 0 && (a[8] == 0 || a[8] == '=')) {
            repeat = lz_positive("--repeat", lz_option_value(argc, argv, &i, "--repeat"));
        } else {
            fprintf(stderr, "%s: error: unknown argument '%s'\n", lz_program, a);
            lz_usage(stderr);
            return 1;
        }
    }
    for (int i = 0; i < LZ_NUM_INPUTS; i++)
        if (!paths[i]) lz_fail("missing input '%s' (give it with --input %s=FILE.npy)", lz_inputs[i].name, lz_inputs[i].name);
    if (!output_dir) lz_fail("missing --output-dir DIR (where the outputs' .npy files go)");

    const void *inputs[LZ_NUM_INPUTS + 1];
    for (int i = 0; i < LZ_NUM_INPUTS; i++) inputs[i] = lz_load_input(i, paths[i]);
    struct stat st;
    if (stat(output_dir, &st) != 0) {
        if (mkdir(output_dir, 0777) != 0) lz_fail("cannot create the output directory '%s': %s", output_dir, strerror(errno));
    } else if (!S_ISDIR(st.st_mode)) {
        lz_fail("the output directory '%s' is not a directory", output_dir);
    }
    void *outputs[LZ_NUM_OUTPUTS + 1];
    for (int i = 0; i < LZ_NUM_OUTPUTS; i++)
        if (!(outputs[i] = lz_aligned_alloc(lz_outputs[i].nbytes))) lz_fail("out of memory");

    lz_model *model = lz_model_create(threads);
    if (!model) lz_fail("%s", lz_model_last_error(NULL));
    if (profile && lz_model_profile(model) != 0) lz_fail("out of memory");
    double best = 1e300, total = 0;
    for (int r = 0; r < repeat; r++) {
        double start = lz_now();
        if (lz_model_run(model, NULL, inputs, LZ_NUM_INPUTS, NULL, outputs, LZ_NUM_OUTPUTS) != 0)
            lz_fail("%s", lz_model_last_error(model));
        double t = lz_now() - start;
        total += t;
        if (t < best) best = t;
    }
    if (repeat > 1)
        fprintf(stderr, "%s: %d runs on %d threads: mean %.3f ms, best %.3f ms\n", lz_program, repeat,
                lz_model_num_threads(model), 1e3 * total / repeat, 1e3 * best);
    if (profile) lz_print_profile(model->launch_seconds, model->launch_calls, repeat, total);
    for (int i = 0; i < LZ_NUM_OUTPUTS; i++) lz_write_output(i, output_dir, outputs[i]);
    lz_model_destroy(model);
    return 0;
}

#endif /* LZ_EXECUTABLE */
