/* Concurrent PocketSphinx sessions, as `voicepipe serve` runs them: each thread creates a decoder,
 * decodes a recording utterance by utterance, and frees the decoder, over and over; no lock around
 * anything. Built against Debian's libpocketsphinx3 and run under valgrind (memcheck, helgrind) it
 * shows what the library shares between decoders:
 *
 *   cc -O1 -g race.c -o race $(pkg-config --cflags --libs pocketsphinx) -lpthread
 *   valgrind --tool=helgrind --error-exitcode=9 ./race THREADS ROUNDS RAW16K [logfn|serial]
 *
 * `logfn`: every decoder is configured with `-logfn /dev/null` (each ps_init then opens a new log file,
 * makes it the process-wide one and fcloses the one other threads may be writing to). `serial`: decoder
 * creation is serialized by a mutex (what voicepipe did before). RAW16K is 16 kHz mono s16le audio.
 * Prints the words of each round and how long each decoder took to create. */
#include <pocketsphinx.h>
#include <sphinxbase/err.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int16_t *audio;
static size_t samples;
static int rounds;
static int with_logfn, serial;
static pthread_mutex_t creation = PTHREAD_MUTEX_INITIALIZER;

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }

static void *session(void *arg) {
    long id = (long)arg;
    for (int r = 0; r < rounds; r++) {
        char *argv[12];
        int argc = 0;
        argv[argc++] = "-hmm"; argv[argc++] = "/usr/share/pocketsphinx/model/en-us/en-us";
        argv[argc++] = "-dict"; argv[argc++] = "/usr/share/pocketsphinx/model/en-us/cmudict-en-us.dict";
        argv[argc++] = "-lm"; argv[argc++] = "/usr/share/pocketsphinx/model/en-us/en-us.lm.bin";
        argv[argc++] = "-samprate"; argv[argc++] = "16000";
        if (with_logfn) { argv[argc++] = "-logfn"; argv[argc++] = "/dev/null"; }
        cmd_ln_t *config = cmd_ln_parse_r(NULL, ps_args(), argc, argv, 1);
        if (!config) { fprintf(stderr, "thread %ld: configuration refused\n", id); exit(2); }
        double began = now();
        if (serial) pthread_mutex_lock(&creation);
        ps_decoder_t *ps = ps_init(config);
        if (serial) pthread_mutex_unlock(&creation);
        double created = now() - began;
        if (!ps) { fprintf(stderr, "thread %ld: ps_init failed\n", id); exit(2); }
        ps_start_utt(ps);
        for (size_t at = 0; at < samples; at += 1600) {
            size_t n = samples - at < 1600 ? samples - at : 1600;
            ps_process_raw(ps, audio + at, n, 0, 0);
        }
        ps_end_utt(ps);
        int32 score;
        const char *hyp = ps_get_hyp(ps, &score);
        printf("thread %ld round %d: created in %.0f ms: %s\n", id, r, created * 1000, hyp ? hyp : "(none)");
        fflush(stdout);
        ps_free(ps);
        cmd_ln_free_r(config);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: race THREADS ROUNDS RAW16K [logfn|serial]\n"); return 2; }
    int threads = atoi(argv[1]);
    rounds = atoi(argv[2]);
    with_logfn = argc > 4 && strcmp(argv[4], "logfn") == 0;
    serial = argc > 4 && strcmp(argv[4], "serial") == 0;
    FILE *f = fopen(argv[3], "rb");
    if (!f) { perror(argv[3]); return 2; }
    fseek(f, 0, SEEK_END); long bytes = ftell(f); fseek(f, 0, SEEK_SET);
    audio = malloc(bytes); samples = fread(audio, 2, bytes / 2, f); fclose(f);
    if (!with_logfn) err_set_logfp(NULL);
    pthread_t t[64];
    for (long i = 0; i < threads && i < 64; i++) pthread_create(&t[i], NULL, session, (void *)i);
    for (long i = 0; i < threads && i < 64; i++) pthread_join(t[i], NULL);
    free(audio);
    return 0;
}
