/*
 * Greedy generation through rml's C ABI: loads a model (a GGUF file or a Hugging Face folder),
 * tokenizes a prompt with the model's own tokenizer, prefills it and prints the next N tokens,
 * their ids and the text. f32 activations (exact), RML_SCHEDULE_PROPORTIONAL2.
 *
 *   generate MODEL [PROMPT] [N]      (defaults: "Once upon a time, there was a little", 16)
 *
 * Output (stdout):
 *   prompt ids: 7513 2040 ...
 *   ids: 8180 3365 ...
 *   text: <the continuation>
 * Exit status 0 on success, 1 on any failure (with rml's error message on stderr).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rml.h"

#define TRY(call)                                                                             \
    do {                                                                                      \
        RmlStatus s_ = (call);                                                                \
        if (s_ != RML_STATUS_OK) {                                                            \
            fprintf(stderr, "generate: %s failed: %s: %s\n", #call, rml_status_name(s_),      \
                    rml_last_error());                                                        \
            goto done;                                                                        \
        }                                                                                     \
    } while (0)

int main(int argc, char **argv) {
    if (argc < 2 || argc > 4) {
        fprintf(stderr, "usage: %s MODEL [PROMPT] [N]\n", argv[0]);
        return 2;
    }
    const char *prompt = argc > 2 ? argv[2] : "Once upon a time, there was a little";
    long n = argc > 3 ? strtol(argv[3], NULL, 10) : 16;
    if (n < 1 || n > 4096) {
        fprintf(stderr, "generate: N must be in 1..4096\n");
        return 2;
    }

    int rc = 1;
    RmlModel *model = NULL;
    RmlTokenizer *tok = NULL;
    RmlDecoder *dec = NULL;
    RmlSampler *sampler = NULL;
    uint32_t *prompt_ids = NULL, *out_ids = NULL;
    char *text = NULL;
    size_t n_prompt = 0, text_len = 0;

    TRY(rml_model_open(argv[1], &model));
    RmlModelInfo info;
    TRY(rml_model_info(model, &info));
    TRY(rml_tokenizer_from_model(model, &tok));

    /* Count the prompt's tokens, then fetch them. */
    TRY(rml_tokenizer_encode(tok, prompt, strlen(prompt), 0, NULL, 0, &n_prompt));
    prompt_ids = malloc((n_prompt ? n_prompt : 1) * sizeof *prompt_ids);
    out_ids = malloc((size_t)n * sizeof *out_ids);
    if (!prompt_ids || !out_ids) {
        fprintf(stderr, "generate: out of memory\n");
        goto done;
    }
    TRY(rml_tokenizer_encode(tok, prompt, strlen(prompt), 0, prompt_ids, n_prompt, &n_prompt));
    printf("prompt ids:");
    for (size_t i = 0; i < n_prompt; i++) printf(" %u", prompt_ids[i]);
    printf("\n");

    RmlDecoderOptions opts = rml_decoder_options_default();
    opts.activations = RML_ACTIVATIONS_F32;
    opts.schedule = RML_SCHEDULE_PROPORTIONAL2;
    opts.context_len = n_prompt + (size_t)n;
    TRY(rml_decoder_new(model, &opts, &dec));
    /* The decoder keeps the model's bytes alive: the model handle is not needed any more. */
    TRY(rml_model_free(model));
    model = NULL;

    RmlSamplerOptions greedy = rml_sampler_options_default();
    TRY(rml_sampler_new(&greedy, info.vocab_size, &sampler));

    const float *logits = NULL;
    size_t n_logits = 0;
    TRY(rml_decoder_prefill(dec, prompt_ids, n_prompt, &logits, &n_logits));
    for (long i = 0; i < n; i++) {
        TRY(rml_sampler_sample(sampler, logits, n_logits, &out_ids[i]));
        if (i + 1 < n) TRY(rml_decoder_decode(dec, out_ids[i], &logits, &n_logits));
    }
    printf("ids:");
    for (long i = 0; i < n; i++) printf(" %u", out_ids[i]);
    printf("\n");

    TRY(rml_tokenizer_decode(tok, out_ids, (size_t)n, NULL, 0, &text_len));
    text = malloc(text_len + 1);
    if (!text) {
        fprintf(stderr, "generate: out of memory\n");
        goto done;
    }
    TRY(rml_tokenizer_decode(tok, out_ids, (size_t)n, text, text_len + 1, &text_len));
    printf("text: %s\n", text);
    rc = 0;

done:
    free(text);
    free(out_ids);
    free(prompt_ids);
    /* Each free returns a status too; with live handles (or NULL) it is RML_STATUS_OK. */
    if (rml_sampler_free(sampler) != RML_STATUS_OK || rml_decoder_free(dec) != RML_STATUS_OK ||
        rml_tokenizer_free(tok) != RML_STATUS_OK || rml_model_free(model) != RML_STATUS_OK) {
        fprintf(stderr, "generate: free failed: %s\n", rml_last_error());
        rc = 1;
    }
    return rc;
}
