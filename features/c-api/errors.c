/*
 * Every error path of rml's C ABI, from C: NULL arguments, bad lengths, bad options, bad
 * paths, bad bytes, freed / doubly freed / mistyped / invented handles, out-of-range token ids
 * and positions, too-small output buffers, and the per-thread last-error message. Each check
 * also asserts the message names what was wrong. Runs in about a second.
 *
 *   errors TINY_LLAMA_DIR TINY_LLAMA_GGUF TOKENIZER_JSON
 *
 * (tests/data/tiny-llama/f32, tests/data/tiny-llama-gguf/tiny-llama-Q8_0.gguf,
 * tests/data/smollm2-135m/tokenizer.json). Prints one line per failed check and a summary;
 * exit status 0 only if every check passed.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rml.h"

static int checks, failures;

/* `call` must return `want`, and rml_last_error() must contain `needle` (or be empty for OK). */
#define EXPECT(want, needle, call)                                                            \
    do {                                                                                      \
        RmlStatus got_ = (call);                                                              \
        const char *msg_ = rml_last_error();                                                  \
        checks++;                                                                             \
        if (got_ != (want)) {                                                                 \
            failures++;                                                                       \
            printf("FAIL line %d: %s returned %s, want %s (%s)\n", __LINE__, #call,           \
                   rml_status_name(got_), rml_status_name(want), msg_);                       \
        } else if ((want) == RML_STATUS_OK ? msg_[0] != '\0' : strstr(msg_, (needle)) == NULL) { \
            failures++;                                                                       \
            printf("FAIL line %d: %s: last error \"%s\" does not contain \"%s\"\n", __LINE__,   \
                   #call, msg_, (needle));                                                    \
        }                                                                                     \
    } while (0)

#define CHECK(cond)                                                                           \
    do {                                                                                      \
        checks++;                                                                             \
        if (!(cond)) {                                                                        \
            failures++;                                                                       \
            printf("FAIL line %d: %s\n", __LINE__, #cond);                                   \
        }                                                                                     \
    } while (0)

#define OK(call) EXPECT(RML_STATUS_OK, "", call)
#define INVALID(needle, call) EXPECT(RML_STATUS_INVALID_ARGUMENT, needle, call)

static unsigned char *read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(n > 0 ? (size_t)n : 1);
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *len = (size_t)n;
    return buf;
}

/* A failure on another thread leaves this thread's last error alone. */
static void *fail_on_other_thread(void *arg) {
    (void)arg;
    RmlModel *m;
    RmlStatus s = rml_model_open(NULL, &m);
    int ok = s == RML_STATUS_INVALID_ARGUMENT && strstr(rml_last_error(), "path is NULL") != NULL;
    return ok ? (void *)1 : NULL;
}

static size_t argmax(const float *x, size_t n) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s TINY_LLAMA_DIR TINY_LLAMA_GGUF TOKENIZER_JSON\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1], *gguf_path = argv[2], *tok_path = argv[3];

    /* ---- static strings */
    CHECK(strcmp(rml_status_name(RML_STATUS_OK), "OK") == 0);
    CHECK(strcmp(rml_status_name(RML_STATUS_DATA_LOSS), "DATA_LOSS") == 0);
    CHECK(strcmp(rml_status_name(12345), "UNKNOWN") == 0);
    CHECK(rml_version() != NULL && rml_version()[0] != '\0');
    CHECK(rml_last_error() != NULL && rml_last_error()[0] == '\0');

    /* ---- opening from a path */
    RmlModel *m = (RmlModel *)1; /* every failure must reset the out-parameter to NULL */
    INVALID("rml_model_open: INVALID_ARGUMENT: path is NULL", rml_model_open(NULL, &m));
    CHECK(m == NULL);
    INVALID("out is NULL", rml_model_open(dir, NULL));
    INVALID("path is empty", rml_model_open("", &m));
    EXPECT(RML_STATUS_IO, "/no/such/model.gguf", rml_model_open("/no/such/model.gguf", &m));
    CHECK(m == NULL);
    EXPECT(RML_STATUS_NOT_FOUND, "no config.json", rml_model_open("/", &m));
    EXPECT(RML_STATUS_DATA_LOSS, "tokenizer.json", rml_model_open(tok_path, &m)); /* not GGUF */
    CHECK(m == NULL);

    /* ---- opening from bytes */
    size_t glen = 0;
    unsigned char *gbytes = read_file(gguf_path, &glen);
    CHECK(gbytes != NULL && glen > 1000);
    if (!gbytes) return 1;
    INVALID("data is NULL", rml_model_open_bytes(NULL, 10, &m));
    INVALID("len is 0", rml_model_open_bytes(gbytes, 0, &m));
    INVALID("out is NULL", rml_model_open_bytes(gbytes, glen, NULL));
    INVALID("larger than any array", rml_model_open_bytes(gbytes, SIZE_MAX, &m));
    EXPECT(RML_STATUS_DATA_LOSS, "GGUF: bad magic", rml_model_open_bytes((const uint8_t *)"garbage!", 8, &m));
    CHECK(m == NULL);
    EXPECT(RML_STATUS_DATA_LOSS, "DATA_LOSS", rml_model_open_bytes(gbytes, glen / 2, &m));
    INVALID("len is 0", rml_model_open_bytes_borrowed(gbytes, 0, &m));
    EXPECT(RML_STATUS_DATA_LOSS, "DATA_LOSS", rml_model_open_bytes_borrowed(gbytes, 64, &m));
    RmlModel *mb = NULL, *mborrowed = NULL;
    OK(rml_model_open_bytes(gbytes, glen, &mb));
    OK(rml_model_open_bytes_borrowed(gbytes, glen, &mborrowed));
    CHECK(mb != NULL && mborrowed != NULL && mb != mborrowed);

    /* ---- a model and its info */
    OK(rml_model_open(dir, &m));
    CHECK(m != NULL);
    RmlModelInfo info;
    INVALID("info is NULL", rml_model_info(m, NULL));
    INVALID("RmlModel handle is NULL", rml_model_info(NULL, &info));
    OK(rml_model_info(m, &info));
    CHECK(info.vocab_size > 0 && info.num_layers > 0 && info.max_position_embeddings > 0);
    const size_t vocab = info.vocab_size;

    /* ---- bad decoder options */
    RmlDecoder *d = (RmlDecoder *)1;
    RmlDecoderOptions o = rml_decoder_options_default();
    o.schedule = 99;
    INVALID("options.schedule 99", rml_decoder_new(m, &o, &d));
    CHECK(d == NULL);
    o = rml_decoder_options_default();
    o.activations = 7;
    INVALID("options.activations 7", rml_decoder_new(m, &o, &d));
    o = rml_decoder_options_default();
    o.weight_format = 5;
    INVALID("options.weight_format 5", rml_decoder_new(m, &o, &d));
    o = rml_decoder_options_default();
    o.threads = 100000;
    INVALID("options.threads 100000", rml_decoder_new(m, &o, &d));
    o = rml_decoder_options_default();
    o.context_len = info.max_position_embeddings + 1;
    INVALID("max_position_embeddings", rml_decoder_new(m, &o, &d));
    INVALID("RmlModel handle is NULL", rml_decoder_new(NULL, NULL, &d));
    INVALID("out is NULL", rml_decoder_new(m, NULL, NULL));

    /* ---- a decoder with 8 positions, one thread */
    o = rml_decoder_options_default();
    o.threads = 1;
    o.context_len = 8;
    OK(rml_decoder_new(m, &o, &d));
    CHECK(d != NULL);
    const uint32_t toks[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    const float *logits = NULL;
    size_t nl = 0, pos = 99, ctx = 0;
    INVALID("tokens is NULL", rml_decoder_prefill(d, NULL, 3, &logits, &nl));
    INVALID("n_tokens is 0", rml_decoder_prefill(d, toks, 0, &logits, &nl));
    INVALID("logits is NULL", rml_decoder_prefill(d, toks, 3, NULL, &nl));
    INVALID("n_logits is NULL", rml_decoder_prefill(d, toks, 3, &logits, NULL));
    INVALID("larger than any array", rml_decoder_prefill(d, toks, SIZE_MAX / 2, &logits, &nl));
    INVALID("RmlDecoder handle is NULL", rml_decoder_prefill(NULL, toks, 3, &logits, &nl));
    uint32_t bad_tok[2] = {1, (uint32_t)vocab};
    EXPECT(RML_STATUS_OUT_OF_RANGE, "past the vocabulary", rml_decoder_prefill(d, bad_tok, 2, &logits, &nl));
    EXPECT(RML_STATUS_OUT_OF_RANGE, "context length 8 exceeded",
           rml_decoder_prefill(d, toks, 9, &logits, &nl));
    OK(rml_decoder_position(d, &pos));
    CHECK(pos == 0); /* nothing cached by the failed calls */
    INVALID("position is NULL", rml_decoder_position(d, NULL));
    INVALID("context_len is NULL", rml_decoder_context_len(d, NULL));
    OK(rml_decoder_context_len(d, &ctx));
    CHECK(ctx == 8);
    OK(rml_decoder_prefill(d, toks, 3, &logits, &nl));
    CHECK(logits != NULL && nl == vocab);
    float first[4096];
    CHECK(nl <= 4096);
    memcpy(first, logits, (nl <= 4096 ? nl : 4096) * sizeof(float));
    EXPECT(RML_STATUS_OUT_OF_RANGE, "past the vocabulary", rml_decoder_decode(d, (uint32_t)vocab, &logits, &nl));
    INVALID("logits is NULL", rml_decoder_decode(d, 1, NULL, &nl));
    for (int i = 0; i < 5; i++) OK(rml_decoder_decode(d, 4, &logits, &nl));
    EXPECT(RML_STATUS_OUT_OF_RANGE, "context length 8 exceeded", rml_decoder_decode(d, 4, &logits, &nl));
    EXPECT(RML_STATUS_OUT_OF_RANGE, "cannot rewind to position 100", rml_decoder_rewind(d, 100));
    OK(rml_decoder_rewind(d, 0));
    OK(rml_decoder_position(d, &pos));
    CHECK(pos == 0);

    /* The same model from bytes (copied, and borrowed) and with a thread pool gives the same
     * logits bit for bit (the GGUF holds the same tiny Llama, in Q8_0). */
    {
        RmlDecoder *d1 = NULL, *d2 = NULL, *d3 = NULL;
        RmlModel *mg = NULL;
        OK(rml_model_open(gguf_path, &mg));
        RmlDecoderOptions o1 = rml_decoder_options_default(), o2 = o1;
        o1.threads = 1;
        o2.threads = 2;
        o2.schedule = RML_SCHEDULE_FIXED8;
        OK(rml_decoder_new(mg, &o1, &d1));
        OK(rml_decoder_new(mb, &o2, &d2));
        OK(rml_decoder_new(mborrowed, &o1, &d3));
        const float *l1, *l2, *l3;
        size_t n1, n2, n3;
        OK(rml_decoder_prefill(d1, toks, 5, &l1, &n1));
        OK(rml_decoder_prefill(d2, toks, 5, &l2, &n2));
        OK(rml_decoder_prefill(d3, toks, 5, &l3, &n3));
        CHECK(n1 == n2 && n1 == n3 && memcmp(l1, l2, n1 * sizeof(float)) == 0 &&
              memcmp(l1, l3, n1 * sizeof(float)) == 0);
        OK(rml_decoder_free(d1));
        OK(rml_decoder_free(d2));
        OK(rml_decoder_free(d3));
        OK(rml_model_free(mg));
    }
    OK(rml_model_free(mb));
    OK(rml_model_free(mborrowed));
    free(gbytes);

    /* ---- bad sampler options and arguments */
    RmlSampler *s = (RmlSampler *)1;
    RmlSamplerOptions so = rml_sampler_options_default();
    so.temperature = -1.0f;
    INVALID("temperature must be finite and >= 0", rml_sampler_new(&so, vocab, &s));
    CHECK(s == NULL);
    so.temperature = NAN;
    INVALID("temperature", rml_sampler_new(&so, vocab, &s));
    so = rml_sampler_options_default();
    so.top_p = 1.5f;
    INVALID("top_p must be in (0, 1]", rml_sampler_new(&so, vocab, &s));
    so.top_p = -0.25f;
    INVALID("top_p", rml_sampler_new(&so, vocab, &s));
    so = rml_sampler_options_default();
    so.repetition_penalty = -2.0f;
    INVALID("repetition_penalty must be finite and > 0", rml_sampler_new(&so, vocab, &s));
    INVALID("vocabulary size 0", rml_sampler_new(NULL, 0, &s));
    INVALID("out is NULL", rml_sampler_new(NULL, vocab, NULL));
    OK(rml_sampler_new(NULL, vocab, &s));
    uint32_t t = 0;
    INVALID("logits for a vocabulary of", rml_sampler_sample(s, first, vocab - 1, &t));
    INVALID("n_logits is 0", rml_sampler_sample(s, first, 0, &t));
    INVALID("logits is NULL", rml_sampler_sample(s, NULL, vocab, &t));
    INVALID("token is NULL", rml_sampler_sample(s, first, vocab, NULL));
    INVALID("RmlSampler handle is NULL", rml_sampler_sample(NULL, first, vocab, &t));
    OK(rml_sampler_sample(s, first, vocab, &t));
    CHECK(t == argmax(first, vocab));
    OK(rml_sampler_record(s, NULL, 0));
    INVALID("tokens is NULL", rml_sampler_record(s, NULL, 2));
    EXPECT(RML_STATUS_OUT_OF_RANGE, "past the vocabulary", rml_sampler_record(s, bad_tok, 2));
    OK(rml_sampler_reset(s));

    /* ---- tokenizers */
    RmlTokenizer *tk = (RmlTokenizer *)1;
    EXPECT(RML_STATUS_NOT_FOUND, "looked for tests/data/tiny-llama/f32/tokenizer.json (absent)", rml_tokenizer_from_model(m, &tk));
    CHECK(tk == NULL);
    INVALID("RmlModel handle is NULL", rml_tokenizer_from_model(NULL, &tk));
    INVALID("path is NULL", rml_tokenizer_open(NULL, &tk));
    EXPECT(RML_STATUS_IO, "/no/such/tokenizer.json", rml_tokenizer_open("/no/such/tokenizer.json", &tk));
    EXPECT(RML_STATUS_DATA_LOSS, "DATA_LOSS", rml_tokenizer_open(gguf_path, &tk));
    OK(rml_tokenizer_open(tok_path, &tk));
    const char *text = "Once upon a time";
    size_t ntok = 0, tlen = 0;
    uint32_t ids[64];
    char buf[256];
    INVALID("text is NULL", rml_tokenizer_encode(tk, NULL, 3, 0, ids, 64, &ntok));
    INVALID("n_tokens is NULL", rml_tokenizer_encode(tk, text, strlen(text), 0, ids, 64, NULL));
    INVALID("tokens is NULL", rml_tokenizer_encode(tk, text, strlen(text), 0, NULL, 64, &ntok));
    INVALID("not valid UTF-8", rml_tokenizer_encode(tk, "\xff\xfe", 2, 0, ids, 64, &ntok));
    OK(rml_tokenizer_encode(tk, text, strlen(text), 0, NULL, 0, &ntok)); /* count only */
    CHECK(ntok == 4);
    ntok = 0;
    EXPECT(RML_STATUS_OUT_OF_RANGE, "do not fit in capacity 2",
           rml_tokenizer_encode(tk, text, strlen(text), 0, ids, 2, &ntok));
    CHECK(ntok == 4);
    OK(rml_tokenizer_encode(tk, text, strlen(text), 0, ids, 64, &ntok));
    CHECK(ntok == 4);
    INVALID("text_len is NULL", rml_tokenizer_decode(tk, ids, ntok, buf, sizeof buf, NULL));
    INVALID("text is NULL", rml_tokenizer_decode(tk, ids, ntok, NULL, sizeof buf, &tlen));
    INVALID("tokens is NULL", rml_tokenizer_decode(tk, NULL, 2, buf, sizeof buf, &tlen));
    uint32_t far[1] = {4000000000u};
    EXPECT(RML_STATUS_OUT_OF_RANGE, "token id 4000000000", rml_tokenizer_decode(tk, far, 1, buf, sizeof buf, &tlen));
    EXPECT(RML_STATUS_OUT_OF_RANGE, "do not fit in capacity 16",
           rml_tokenizer_decode(tk, ids, ntok, buf, 16, &tlen)); /* 16 bytes + NUL needed */
    CHECK(tlen == strlen(text));
    OK(rml_tokenizer_decode(tk, ids, ntok, buf, sizeof buf, &tlen));
    CHECK(strcmp(buf, text) == 0);
    uint32_t id = 0;
    OK(rml_tokenizer_token_id(tk, "<|im_end|>", &id));
    CHECK(id == 2);
    EXPECT(RML_STATUS_NOT_FOUND, "is not in the vocabulary", rml_tokenizer_token_id(tk, "no such token, surely", &id));
    INVALID("token is NULL", rml_tokenizer_token_id(tk, NULL, &id));
    INVALID("id is NULL", rml_tokenizer_token_id(tk, "<|im_end|>", NULL));

    /* ---- handles: wrong kind, invented, stale, doubly freed */
    INVALID("is an RmlSampler, not an RmlDecoder", rml_decoder_free((RmlDecoder *)s));
    INVALID("is an RmlDecoder, not an RmlModel", rml_model_info((RmlModel *)d, &info));
    OK(rml_sampler_sample(s, first, vocab, &t)); /* still alive after the mistyped free */
    INVALID("not live", rml_model_info((RmlModel *)(uintptr_t)0x12345, &info));
    int local = 0;
    INVALID("not live", rml_model_free((RmlModel *)&local)); /* a real address is not a handle */

    OK(rml_decoder_free(d));
    OK(rml_model_free(m));
    INVALID("rml_model_free: INVALID_ARGUMENT: RmlModel handle", rml_model_free(m));
    INVALID("not live", rml_model_info(m, &info));
    INVALID("not live", rml_decoder_new(m, NULL, &d));
    CHECK(d == NULL);
    RmlDecoder *dlive = NULL;
    o = rml_decoder_options_default();
    o.threads = 1;
    o.context_len = 8;
    /* A decoder keeps its model's bytes alive after the model handle is freed. */
    OK(rml_model_open(dir, &m));
    OK(rml_decoder_new(m, &o, &dlive));
    OK(rml_model_free(m));
    OK(rml_decoder_prefill(dlive, toks, 3, &logits, &nl));
    CHECK(nl == vocab && memcmp(logits, first, nl * sizeof(float)) == 0);
    OK(rml_decoder_free(dlive));
    INVALID("not live", rml_decoder_free(dlive));
    INVALID("not live", rml_decoder_decode(dlive, 1, &logits, &nl));
    INVALID("not live", rml_decoder_position(dlive, &pos));
    INVALID("not live", rml_decoder_rewind(dlive, 0));

    OK(rml_sampler_free(s));
    INVALID("not live", rml_sampler_free(s));
    INVALID("not live", rml_sampler_sample(s, first, vocab, &t));
    INVALID("not live", rml_sampler_reset(s));
    OK(rml_tokenizer_free(tk));
    INVALID("not live", rml_tokenizer_free(tk));
    INVALID("not live", rml_tokenizer_encode(tk, text, strlen(text), 0, ids, 64, &ntok));

    /* free(NULL) does nothing */
    OK(rml_model_free(NULL));
    OK(rml_decoder_free(NULL));
    OK(rml_sampler_free(NULL));
    OK(rml_tokenizer_free(NULL));

    /* ---- the last error is per thread */
    INVALID("not live", rml_sampler_free(s));
    pthread_t th;
    void *ret = NULL;
    CHECK(pthread_create(&th, NULL, fail_on_other_thread, NULL) == 0);
    CHECK(pthread_join(th, &ret) == 0 && ret == (void *)1);
    CHECK(strstr(rml_last_error(), "rml_sampler_free") != NULL);

    printf("%s: %d checks, %d failed\n", failures ? "FAIL" : "ok", checks, failures);
    return failures ? 1 : 0;
}
