#pragma once
#include <stdio.h>
#include <pocketsphinx.h>
#include <sphinxbase/err.h>
#include <sphinxbase/cmd_ln.h>
#include <sphinxbase/logmath.h>

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
