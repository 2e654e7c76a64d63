/*
 * Sentence embeddings through rml's C ABI (rml_encoder_open / rml_embed): embeds the texts
 * given in one call on 2 threads and checks, from C, that
 *   - the vectors are DIM long (rml_encoder_dim), every value finite, each of L2 norm 1
 *     (within 1e-5, summed in double);
 *   - an encoder on 1 thread gives the same bits;
 *   - each text embedded alone gives its vector within 1e-5 (a batch of 1 vs a batch of all);
 *   - the error paths return their status and a message, write no handle and no vector:
 *     a missing path (NOT_FOUND, the path named), a NULL path, a too-small output buffer
 *     (OUT_OF_RANGE, nothing written), a text that is not UTF-8, a freed handle.
 * Then it writes the vectors (n_texts x DIM floats, native byte order) to OUT, for .ci/run to
 * compare byte for byte with what `rml embed --format npy` (the Rust `Encoder::embed`) gives.
 *
 *   embed MODEL DIM INT8 OUT TEXT...      (INT8: 0 f32, 1 int8; MODEL: a sentence-transformers
 *                                          folder or a BERT GGUF)
 *
 * Prints one line per failed check and a summary; exit status 0 only if every check passed.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rml.h"

static int checks, failures;

#define CHECK(cond, ...)                                                                      \
    do {                                                                                      \
        checks++;                                                                             \
        if (!(cond)) {                                                                        \
            failures++;                                                                       \
            printf("FAIL line %d: %s: ", __LINE__, #cond);                                   \
            printf(__VA_ARGS__);                                                              \
            printf("\n");                                                                     \
        }                                                                                     \
    } while (0)

#define OK(call)                                                                              \
    do {                                                                                      \
        RmlStatus s_ = (call);                                                                \
        CHECK(s_ == RML_STATUS_OK, "%s: %s", rml_status_name(s_), rml_last_error());          \
        if (s_ != RML_STATUS_OK) goto done;                                                   \
    } while (0)

static RmlEncoder *open_encoder(const char *path, uint32_t threads, uint32_t int8) {
    RmlEncoderOptions o = rml_encoder_options_default();
    o.threads = threads;
    o.int8 = int8;
    RmlEncoder *enc = NULL;
    RmlStatus s = rml_encoder_open(path, &o, &enc);
    CHECK(s == RML_STATUS_OK && enc != NULL, "open %s on %u threads: %s: %s", path, threads,
          rml_status_name(s), rml_last_error());
    return enc;
}

int main(int argc, char **argv) {
    if (argc < 6) {
        fprintf(stderr, "usage: %s MODEL DIM INT8 OUT TEXT...\n", argv[0]);
        return 2;
    }
    const char *model = argv[1];
    size_t want_dim = (size_t)strtoul(argv[2], NULL, 10);
    uint32_t int8 = (uint32_t)strtoul(argv[3], NULL, 10);
    const char *out_path = argv[4];
    size_t n = (size_t)(argc - 5);
    const char *const *texts = (const char *const *)&argv[5];

    RmlEncoder *enc = NULL, *one = NULL;
    float *vecs = NULL, *again = NULL, *alone = NULL, *small = NULL;
    size_t *lens = malloc(n * sizeof *lens);
    if (!lens) return 1;
    for (size_t i = 0; i < n; i++) lens[i] = strlen(texts[i]);

    enc = open_encoder(model, 2, int8);
    if (!enc) goto done;
    size_t dim = 0;
    OK(rml_encoder_dim(enc, &dim));
    CHECK(dim == want_dim, "dim %zu, want %zu", dim, want_dim);
    if (dim == 0) goto done;
    vecs = calloc(n * dim, sizeof *vecs);
    again = calloc(n * dim, sizeof *again);
    alone = calloc(dim, sizeof *alone);
    small = malloc((n * dim - 1) * sizeof *small);
    if (!vecs || !again || !alone || !small) goto done;
    OK(rml_embed(enc, texts, lens, n, vecs, n * dim));
    CHECK(rml_last_error()[0] == '\0', "a success leaves a message: %s", rml_last_error());

    /* finite, unit length */
    for (size_t i = 0; i < n; i++) {
        double sq = 0.0;
        int finite = 1;
        for (size_t j = 0; j < dim; j++) {
            float x = vecs[i * dim + j];
            finite &= isfinite(x) != 0;
            sq += (double)x * (double)x;
        }
        CHECK(finite, "text %zu has a value that is not finite", i);
        CHECK(fabs(sqrt(sq) - 1.0) <= 1e-5, "text %zu: norm %.9f", i, sqrt(sq));
    }

    /* 1 thread: the same bits */
    one = open_encoder(model, 1, int8);
    if (!one) goto done;
    OK(rml_embed(one, texts, lens, n, again, n * dim));
    CHECK(memcmp(vecs, again, n * dim * sizeof *vecs) == 0, "1 thread gives other bits");

    /* each text alone: the same vector within 1e-5 */
    for (size_t i = 0; i < n; i++) {
        OK(rml_embed(enc, &texts[i], &lens[i], 1, alone, dim));
        float worst = 0.0f;
        for (size_t j = 0; j < dim; j++) {
            float d = fabsf(alone[j] - vecs[i * dim + j]);
            worst = d > worst ? d : worst;
        }
        CHECK(worst <= 1e-5f, "text %zu alone differs by %g", i, (double)worst);
    }

    /* error paths */
    {
        RmlEncoder *bad = (RmlEncoder *)&checks; /* must be overwritten with NULL */
        const char *missing = "tests/data/no-such-encoder-folder";
        RmlStatus s = rml_encoder_open(missing, NULL, &bad);
        CHECK(s == RML_STATUS_NOT_FOUND, "missing path: %s", rml_status_name(s));
        CHECK(bad == NULL, "missing path: *out is not NULL");
        CHECK(strstr(rml_last_error(), missing) != NULL, "message \"%s\" does not name %s",
              rml_last_error(), missing);
        bad = (RmlEncoder *)&checks;
        s = rml_encoder_open(NULL, NULL, &bad);
        CHECK(s == RML_STATUS_INVALID_ARGUMENT && bad == NULL, "NULL path: %s",
              rml_status_name(s));
        CHECK(rml_last_error()[0] != '\0', "NULL path: no message");

        for (size_t j = 0; j < n * dim - 1; j++) small[j] = 7.0f;
        s = rml_embed(enc, texts, lens, n, small, n * dim - 1);
        CHECK(s == RML_STATUS_OUT_OF_RANGE, "small buffer: %s", rml_status_name(s));
        CHECK(strstr(rml_last_error(), "capacity") != NULL, "small buffer: \"%s\"",
              rml_last_error());
        int untouched = 1;
        for (size_t j = 0; j < n * dim - 1; j++) untouched &= small[j] == 7.0f;
        CHECK(untouched, "small buffer: something was written");

        const char *not_utf8 = "ab\xff\xfe";
        size_t len = strlen(not_utf8);
        s = rml_embed(enc, &not_utf8, &len, 1, alone, dim);
        CHECK(s == RML_STATUS_INVALID_ARGUMENT, "not UTF-8: %s", rml_status_name(s));
        CHECK(rml_last_error()[0] != '\0', "not UTF-8: no message");
        s = rml_embed(enc, NULL, lens, 1, alone, dim);
        CHECK(s == RML_STATUS_INVALID_ARGUMENT, "NULL texts: %s", rml_status_name(s));

        s = rml_encoder_free(one);
        one = NULL;
        CHECK(s == RML_STATUS_OK, "free: %s", rml_status_name(s));
        RmlEncoder *freed = enc;
        OK(rml_encoder_free(enc));
        enc = NULL;
        size_t d = 0;
        s = rml_encoder_dim(freed, &d);
        CHECK(s == RML_STATUS_INVALID_ARGUMENT, "freed handle: %s", rml_status_name(s));
        s = rml_embed(freed, texts, lens, n, again, n * dim);
        CHECK(s == RML_STATUS_INVALID_ARGUMENT, "freed handle: %s", rml_status_name(s));
        s = rml_encoder_free(freed);
        CHECK(s == RML_STATUS_INVALID_ARGUMENT, "double free: %s", rml_status_name(s));
    }

    {
        FILE *f = fopen(out_path, "wb");
        CHECK(f != NULL, "cannot write %s", out_path);
        if (f) {
            CHECK(fwrite(vecs, sizeof *vecs, n * dim, f) == n * dim, "short write");
            fclose(f);
        }
    }

done:
    if (rml_encoder_free(enc) != RML_STATUS_OK || rml_encoder_free(one) != RML_STATUS_OK) {
        printf("FAIL: free: %s\n", rml_last_error());
        failures++;
    }
    free(small);
    free(alone);
    free(again);
    free(vecs);
    free(lens);
    printf("embed %s (%s): %d checks, %d failed\n", model, int8 ? "int8" : "f32", checks,
           failures);
    return failures == 0 && checks > 0 ? 0 : 1;
}
