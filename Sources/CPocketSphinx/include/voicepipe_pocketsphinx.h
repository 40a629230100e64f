/* voicepipe_pocketsphinx.h: PocketSphinx (5prealpha, Debian's libpocketsphinx3) and the parts of
 * sphinxbase voicepipe uses. The functions are defined in voicepipe_pocketsphinx.c, which opens the
 * libraries at first use (dlopen) instead of linking them.
 *
 * sphinxbase's headers are included as before: they are found on the compiler's default path
 * (/usr/include/x86_64-linux-gnu/sphinxbase). pocketsphinx.h is not: it includes its neighbours as
 * <pocketsphinx_export.h>, <ps_lattice.h>..., which only an -I/usr/include/pocketsphinx finds, and a
 * regular SwiftPM target cannot hand that flag to the Swift targets that import it (a system-library
 * target did, from pkg-config). So the part of pocketsphinx.h voicepipe uses is declared here, with
 * the library's names and types; voicepipe_pocketsphinx.c includes the real pocketsphinx.h as well,
 * when it can find it, and the compiler then rejects any declaration below that differs from it. */
#pragma once
#include <stddef.h>
#include <stdio.h>
#include <sphinxbase/err.h>
#include <sphinxbase/cmd_ln.h>
#include <sphinxbase/logmath.h>

/// Loads libpocketsphinx.so.3 and libsphinxbase.so.3 once per process. Returns 1 when they are
/// there; otherwise 0, with a reason naming the library and the Debian package to install in `why`
/// (when it is not NULL). The functions below work without calling it first: until the libraries
/// are loaded, each fails the way the API reports failure (NULL, a negative number).
int vp_pocketsphinx_load(char *why, size_t size);

/* ---- from pocketsphinx.h (5prealpha) ---- */
typedef struct ps_decoder_s ps_decoder_t;
typedef struct ps_astar_s ps_nbest_t;

ps_decoder_t *ps_init(cmd_ln_t *config);
arg_t const *ps_args(void);
int ps_free(ps_decoder_t *ps);
logmath_t *ps_get_logmath(ps_decoder_t *ps);
int ps_start_utt(ps_decoder_t *ps);
int ps_process_raw(ps_decoder_t *ps, int16 const *data, size_t n_samples, int no_search, int full_utt);
int ps_end_utt(ps_decoder_t *ps);
char const *ps_get_hyp(ps_decoder_t *ps, int32 *out_best_score);
ps_nbest_t *ps_nbest(ps_decoder_t *ps);
ps_nbest_t *ps_nbest_next(ps_nbest_t *nbest);
char const *ps_nbest_hyp(ps_nbest_t *nbest, int32 *out_score);
void ps_nbest_free(ps_nbest_t *nbest);

/// Builds a decoder configuration from "-name value" pairs (pocketsphinx 5prealpha has no
/// typed config API; cmd_ln_init is variadic and not callable from Swift).
static inline cmd_ln_t *vp_ps_config(int argc, char **argv) {
    return cmd_ln_parse_r(NULL, ps_args(), argc, argv, 1);
}

/// Silences the library's log output (it goes to stderr by default). Process-wide, once: a decoder
/// must never be given `-logfn`, which makes each ps_init open a log file, install it as the
/// process-wide one and fclose the one other decoders may be writing to at that moment.
static inline void vp_ps_quiet(void) {
    err_set_logfp(NULL);
}

/// The library's process-wide log stream (NULL while silenced).
static inline FILE *vp_ps_logfp(void) {
    return err_get_logfp();
}
