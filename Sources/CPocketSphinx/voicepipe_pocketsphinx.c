/* PocketSphinx and sphinxbase, loaded at first use, behind voicepipe_pocketsphinx.h.
 *
 * The libraries are opened with dlopen the first time one of their functions is called, not linked,
 * so that a `voicepipe` run without speech recognition does not load them (nor BLAS and LAPACK,
 * which sphinxbase needs). Each function voicepipe calls is defined below with its real name and
 * prototype and forwards to the library's function, found with dlsym once. When a library is
 * missing, each function fails the way the API reports failure (NULL, a negative number) and does
 * nothing else.
 *
 * No variadic function is involved: the configuration is parsed by cmd_ln_parse_r (an argv array,
 * see vp_ps_config), not by the variadic cmd_ln_init, which Swift cannot call.
 *
 * The definitions are hidden (VP_LOCAL): they serve voicepipe's own code only. Were they
 * exported from the executable, libpocketsphinx's own calls into sphinxbase would come through them. */
#include "voicepipe_pocketsphinx.h"
#include "vp_library.h"
/* The library's own declarations, when the compiler finds them: pocketsphinx.h includes its neighbours
 * with angle brackets, so it needs -I/usr/include/pocketsphinx, which a C target cannot hand on to the
 * Swift code importing it (hence the declarations in voicepipe_pocketsphinx.h). Built with that flag, the
 * compiler checks each of those declarations against the library's. */
#if __has_include(<pocketsphinx.h>)
#include <pocketsphinx.h>
#endif

#include <pthread.h>
#include <stdio.h>

/* Hidden visibility: the definitions are seen by the rest of the binary they are linked into, and by no
 * shared library (only the definitions: the headers' declarations, libc's included, stay as they are). */
#define VP_LOCAL __attribute__((visibility("hidden")))

/* The sonames (the libraries' ABI versions); overridable to test the missing-library path. */
#ifndef VP_SPHINXBASE_SONAME
#define VP_SPHINXBASE_SONAME "libsphinxbase.so.3"
#endif
#ifndef VP_POCKETSPHINX_SONAME
#define VP_POCKETSPHINX_SONAME "libpocketsphinx.so.3"
#endif

static __typeof__(cmd_ln_free_r) *p_cmd_ln_free_r;
static __typeof__(cmd_ln_parse_r) *p_cmd_ln_parse_r;
static __typeof__(err_get_logfp) *p_err_get_logfp;
static __typeof__(err_set_logfp) *p_err_set_logfp;
static __typeof__(logmath_exp) *p_logmath_exp;
static __typeof__(ps_args) *p_ps_args;
static __typeof__(ps_end_utt) *p_ps_end_utt;
static __typeof__(ps_free) *p_ps_free;
static __typeof__(ps_get_hyp) *p_ps_get_hyp;
static __typeof__(ps_get_logmath) *p_ps_get_logmath;
static __typeof__(ps_init) *p_ps_init;
static __typeof__(ps_nbest) *p_ps_nbest;
static __typeof__(ps_nbest_free) *p_ps_nbest_free;
static __typeof__(ps_nbest_hyp) *p_ps_nbest_hyp;
static __typeof__(ps_nbest_next) *p_ps_nbest_next;
static __typeof__(ps_process_raw) *p_ps_process_raw;
static __typeof__(ps_start_utt) *p_ps_start_utt;

static int sphinx_loaded;
static char sphinx_problem[512];

static void load_sphinx(void) {
    /* libpocketsphinx needs libsphinxbase (its DT_NEEDED), which the loader finds by itself; it is
     * opened first so that a missing one is reported under its own name, and to look its functions up
     * in it. Both handles name the same loaded copy of sphinxbase, whose log stream err_set_logfp sets. */
    void *base = vp_library_open("PocketSphinx", VP_SPHINXBASE_SONAME, "libsphinxbase3", sphinx_problem, sizeof sphinx_problem);
    void *ps = base ? vp_library_open("PocketSphinx", VP_POCKETSPHINX_SONAME, "libpocketsphinx3", sphinx_problem, sizeof sphinx_problem) : NULL;
    int ok = ps != NULL;
    VP_LIBRARY_RESOLVE(ok, base, cmd_ln_free_r, "PocketSphinx", VP_SPHINXBASE_SONAME, sphinx_problem);
    VP_LIBRARY_RESOLVE(ok, base, cmd_ln_parse_r, "PocketSphinx", VP_SPHINXBASE_SONAME, sphinx_problem);
    VP_LIBRARY_RESOLVE(ok, base, err_get_logfp, "PocketSphinx", VP_SPHINXBASE_SONAME, sphinx_problem);
    VP_LIBRARY_RESOLVE(ok, base, err_set_logfp, "PocketSphinx", VP_SPHINXBASE_SONAME, sphinx_problem);
    VP_LIBRARY_RESOLVE(ok, base, logmath_exp, "PocketSphinx", VP_SPHINXBASE_SONAME, sphinx_problem);
    VP_LIBRARY_RESOLVE(ok, ps, ps_args, "PocketSphinx", VP_POCKETSPHINX_SONAME, sphinx_problem);
    VP_LIBRARY_RESOLVE(ok, ps, ps_end_utt, "PocketSphinx", VP_POCKETSPHINX_SONAME, sphinx_problem);
    VP_LIBRARY_RESOLVE(ok, ps, ps_free, "PocketSphinx", VP_POCKETSPHINX_SONAME, sphinx_problem);
    VP_LIBRARY_RESOLVE(ok, ps, ps_get_hyp, "PocketSphinx", VP_POCKETSPHINX_SONAME, sphinx_problem);
    VP_LIBRARY_RESOLVE(ok, ps, ps_get_logmath, "PocketSphinx", VP_POCKETSPHINX_SONAME, sphinx_problem);
    VP_LIBRARY_RESOLVE(ok, ps, ps_init, "PocketSphinx", VP_POCKETSPHINX_SONAME, sphinx_problem);
    VP_LIBRARY_RESOLVE(ok, ps, ps_nbest, "PocketSphinx", VP_POCKETSPHINX_SONAME, sphinx_problem);
    VP_LIBRARY_RESOLVE(ok, ps, ps_nbest_free, "PocketSphinx", VP_POCKETSPHINX_SONAME, sphinx_problem);
    VP_LIBRARY_RESOLVE(ok, ps, ps_nbest_hyp, "PocketSphinx", VP_POCKETSPHINX_SONAME, sphinx_problem);
    VP_LIBRARY_RESOLVE(ok, ps, ps_nbest_next, "PocketSphinx", VP_POCKETSPHINX_SONAME, sphinx_problem);
    VP_LIBRARY_RESOLVE(ok, ps, ps_process_raw, "PocketSphinx", VP_POCKETSPHINX_SONAME, sphinx_problem);
    VP_LIBRARY_RESOLVE(ok, ps, ps_start_utt, "PocketSphinx", VP_POCKETSPHINX_SONAME, sphinx_problem);
    sphinx_loaded = ok;
}

/* 1 once the libraries are loaded (the first call loads them), 0 when they cannot be. */
static int sphinx_ready(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, load_sphinx);
    return sphinx_loaded;
}

int vp_pocketsphinx_load(char *why, size_t size) { return vp_library_status(sphinx_ready(), sphinx_problem, why, size); }

/* ---- sphinxbase ---- */

VP_LOCAL cmd_ln_t *cmd_ln_parse_r(cmd_ln_t *inout_cmdln, arg_t const *defn, int32 argc, char *argv[], int32 strict) {
    if (!sphinx_ready()) return NULL;
    return p_cmd_ln_parse_r(inout_cmdln, defn, argc, argv, strict);
}

VP_LOCAL int cmd_ln_free_r(cmd_ln_t *cmdln) {
    if (!sphinx_ready()) return 0;
    return p_cmd_ln_free_r(cmdln);
}

VP_LOCAL void err_set_logfp(FILE *stream) {
    if (sphinx_ready()) p_err_set_logfp(stream);
}

VP_LOCAL FILE *err_get_logfp(void) {
    if (!sphinx_ready()) return NULL;
    return p_err_get_logfp();
}

VP_LOCAL float64 logmath_exp(logmath_t *lmath, int logb_p) {
    if (!sphinx_ready()) return 0;
    return p_logmath_exp(lmath, logb_p);
}

/* ---- pocketsphinx ---- */

VP_LOCAL arg_t const *ps_args(void) {
    if (!sphinx_ready()) return NULL;
    return p_ps_args();
}

VP_LOCAL ps_decoder_t *ps_init(cmd_ln_t *config) {
    if (!sphinx_ready()) return NULL;
    return p_ps_init(config);
}

VP_LOCAL int ps_free(ps_decoder_t *ps) {
    if (!sphinx_ready()) return 0;
    return p_ps_free(ps);
}

VP_LOCAL logmath_t *ps_get_logmath(ps_decoder_t *ps) {
    if (!sphinx_ready()) return NULL;
    return p_ps_get_logmath(ps);
}

VP_LOCAL int ps_start_utt(ps_decoder_t *ps) {
    if (!sphinx_ready()) return -1;
    return p_ps_start_utt(ps);
}

VP_LOCAL int ps_process_raw(ps_decoder_t *ps, int16 const *data, size_t n_samples, int no_search, int full_utt) {
    if (!sphinx_ready()) return -1;
    return p_ps_process_raw(ps, data, n_samples, no_search, full_utt);
}

VP_LOCAL int ps_end_utt(ps_decoder_t *ps) {
    if (!sphinx_ready()) return -1;
    return p_ps_end_utt(ps);
}

VP_LOCAL char const *ps_get_hyp(ps_decoder_t *ps, int32 *out_best_score) {
    if (!sphinx_ready()) return NULL;
    return p_ps_get_hyp(ps, out_best_score);
}

VP_LOCAL ps_nbest_t *ps_nbest(ps_decoder_t *ps) {
    if (!sphinx_ready()) return NULL;
    return p_ps_nbest(ps);
}

VP_LOCAL ps_nbest_t *ps_nbest_next(ps_nbest_t *nbest) {
    if (!sphinx_ready()) return NULL;
    return p_ps_nbest_next(nbest);
}

VP_LOCAL char const *ps_nbest_hyp(ps_nbest_t *nbest, int32 *out_score) {
    if (!sphinx_ready()) return NULL;
    return p_ps_nbest_hyp(nbest, out_score);
}

VP_LOCAL void ps_nbest_free(ps_nbest_t *nbest) {
    if (sphinx_ready()) p_ps_nbest_free(nbest);
}
