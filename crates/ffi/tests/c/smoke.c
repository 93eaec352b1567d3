/*
 * smoke.c — drives the statelm C API the way an app host would, and checks what it sees.
 *
 *   smoke MODEL.gguf WORK_DIR
 *
 * Loads the model, streams a generation through the callback, sends memory warnings while
 * generations run and checks the governor's events (SPILLED/RESTORED for an idle session,
 * CONTEXT_TRIMMED keeping at most half for the active one at a warning, EVICTED at critical,
 * after which the session still answers), cancels a generation, saves and reloads a
 * session, checks error codes and misuse detection, and frees everything. Exits 0 and prints
 * "smoke: OK" on success; prints the failed expectation and exits 1 otherwise.
 *
 * Built and run by tests/c_smoke.rs (also under valgrind).
 */
#define _POSIX_C_SOURCE 200809L
#include "statelm.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                     \
    do {                                                                                \
        int rc_ = (call);                                                               \
        if (rc_ != STATELM_OK) {                                                        \
            fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call,    \
                    statelm_status_name(rc_), statelm_last_error_message());            \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

#define EXPECT(cond, ...)                                                               \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "%s:%d: expected %s: ", __FILE__, __LINE__, #cond);         \
            fprintf(stderr, __VA_ARGS__);                                               \
            fputc('\n', stderr);                                                        \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

/* Bans the end-of-generation ids of Gemma (1, 106) and of the synthetic test models (2),
 * so each generation runs to max_tokens or its cancellation. */
#define NO_EOG "\"logit_bias\":{\"1\":-1e9,\"2\":-1e9,\"106\":-1e9}"

enum Action { ACT_NONE, ACT_GATE, ACT_WARN_AND_GATE, ACT_CANCEL, ACT_FOLLOW_UP, ACT_MISUSE };

#define MAX_KINDS 512

/* What one generation's callback saw, and what it does on its first token or at DONE. */
typedef struct Run {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    StatelmEngine *engine;
    enum Action action;
    int warn_level;
    int gate_open;
    StatelmEventKind kinds[MAX_KINDS];
    int n_events;
    int counts[STATELM_EVENT_KIND_OTHER + 1];
    int tokens;
    char text[8192];
    size_t text_len;
    char done_json[1024];
    char trim_json[1024];
    StatelmStopReason stop_reason;
    int error_code;
    int finished;
    int on_caller_thread;
    int misuse_free_rc, misuse_wait_rc;
    struct Run *follow_up; /* ACT_FOLLOW_UP: the run started from DONE */
    uint64_t follow_up_request;
    int follow_up_rc;
} Run;

static pthread_t main_thread;

static void run_init(Run *r, StatelmEngine *engine, enum Action action) {
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->engine = engine;
    r->action = action;
    r->misuse_free_rc = r->misuse_wait_rc = -1;
}

static void run_destroy(Run *r) {
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
}

static const char *kind_name(StatelmEventKind k) {
    switch (k) {
    case STATELM_EVENT_KIND_TOKEN: return "TOKEN";
    case STATELM_EVENT_KIND_TEXT: return "TEXT";
    case STATELM_EVENT_KIND_CONTEXT_TRIMMED: return "CONTEXT_TRIMMED";
    case STATELM_EVENT_KIND_EVICTED: return "EVICTED";
    case STATELM_EVENT_KIND_SPILLED: return "SPILLED";
    case STATELM_EVENT_KIND_RESTORED: return "RESTORED";
    case STATELM_EVENT_KIND_DONE: return "DONE";
    case STATELM_EVENT_KIND_ERROR: return "ERROR";
    default: return "OTHER";
    }
}

static void on_event(void *user_data, const StatelmEvent *ev);

/* The first token's action (called with r->mu held). */
static void first_token(Run *r, const StatelmEvent *ev) {
    switch (r->action) {
    case ACT_WARN_AND_GATE:
        if (statelm_memory_warning(r->engine, r->warn_level) != STATELM_OK) abort();
        /* fall through */
    case ACT_GATE:
        pthread_cond_broadcast(&r->cv);
        while (!r->gate_open) pthread_cond_wait(&r->cv, &r->mu);
        break;
    case ACT_CANCEL:
        if (statelm_cancel(r->engine, ev->request) != STATELM_OK) abort();
        break;
    default:
        break;
    }
}

/* The last event's action (called with r->mu held). */
static void last_event(Run *r, const StatelmEvent *ev) {
    if (r->action == ACT_MISUSE) {
        r->misuse_free_rc = statelm_engine_free(r->engine);
        r->misuse_wait_rc = statelm_wait(r->engine, ev->request, 0);
    }
    if (r->action == ACT_FOLLOW_UP && r->follow_up) {
        /* The next turn, started from DONE: the session is already free. */
        r->follow_up_rc = statelm_generate(r->engine, ev->session, "{\"append\":\" and\"}",
                                           "{\"max_tokens\":2,\"temperature\":0," NO_EOG "}",
                                           on_event, r->follow_up, &r->follow_up_request);
    }
}

static void on_event(void *user_data, const StatelmEvent *ev) {
    Run *r = user_data;
    pthread_mutex_lock(&r->mu);
    if (pthread_equal(pthread_self(), main_thread)) r->on_caller_thread = 1;
    if (r->n_events < MAX_KINDS) r->kinds[r->n_events++] = ev->kind;
    if (ev->kind <= STATELM_EVENT_KIND_OTHER) r->counts[ev->kind]++;
    switch (ev->kind) {
    case STATELM_EVENT_KIND_TOKEN:
    case STATELM_EVENT_KIND_TEXT:
        if (ev->kind == STATELM_EVENT_KIND_TOKEN) r->tokens++;
        if (r->text_len + ev->text_len < sizeof r->text) {
            memcpy(r->text + r->text_len, ev->text, ev->text_len);
            r->text_len += ev->text_len;
            r->text[r->text_len] = 0;
        }
        fwrite(ev->text, 1, ev->text_len, stdout);
        fflush(stdout);
        break;
    case STATELM_EVENT_KIND_DONE:
    case STATELM_EVENT_KIND_ERROR:
        r->stop_reason = ev->stop_reason;
        r->error_code = ev->error_code;
        snprintf(r->done_json, sizeof r->done_json, "%s", ev->json);
        printf("\n  [%s] %s\n", kind_name(ev->kind), ev->json);
        break;
    default:
        if (ev->kind == STATELM_EVENT_KIND_CONTEXT_TRIMMED)
            snprintf(r->trim_json, sizeof r->trim_json, "%s", ev->json);
        printf("\n  [%s] %s\n", kind_name(ev->kind), ev->json);
        break;
    }
    if (ev->kind == STATELM_EVENT_KIND_TOKEN && r->tokens == 1) first_token(r, ev);
    if (ev->kind == STATELM_EVENT_KIND_DONE || ev->kind == STATELM_EVENT_KIND_ERROR) {
        last_event(r, ev);
        r->finished = 1;
    }
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* Blocks until the run's first token was delivered (its callback is then at the gate). */
static void wait_first_token(Run *r) {
    pthread_mutex_lock(&r->mu);
    while (r->tokens == 0 && !r->finished) pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
}

static void open_gate(Run *r) {
    pthread_mutex_lock(&r->mu);
    r->gate_open = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* The integer after "key": in a JSON text (-1 if absent). */
static long json_int(const char *json, const char *key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char *p = strstr(json, pattern);
    return p ? strtol(p + strlen(pattern), NULL, 10) : -1;
}

static long engine_stat(StatelmEngine *engine, const char *key) {
    char *json = NULL;
    CHECK(statelm_engine_stats_json(engine, &json));
    long v = json_int(json, key);
    CHECK(statelm_string_free(json));
    return v;
}

/* Waits (up to 60 s) until the engine's stats count at least `min` of `key`. */
static void wait_stat(StatelmEngine *engine, const char *key, long min) {
    for (int i = 0; i < 6000; i++) {
        if (engine_stat(engine, key) >= min) return;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    EXPECT(0, "the engine's %s never reached %ld", key, min);
}

static int index_of(const Run *r, StatelmEventKind kind) {
    for (int i = 0; i < r->n_events; i++)
        if (r->kinds[i] == kind) return i;
    return -1;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const char *PROMPT_PARAMS = "{\"max_tokens\":8,\"temperature\":0," NO_EOG "}";

/* 1. A generation streamed through the callback; misuse from the callback is refused. */
static void step_stream(StatelmEngine *engine, uint64_t session) {
    printf("[1] streaming a generation:\n  ");
    Run r;
    run_init(&r, engine, ACT_MISUSE);
    uint64_t req = 0;
    CHECK(statelm_generate(engine, session, "{\"prompt\":\"The capital of France is\"}",
                           PROMPT_PARAMS, on_event, &r, &req));
    EXPECT(req != 0, "a request id");
    CHECK(statelm_wait(engine, req, 120000));
    EXPECT(r.finished && r.counts[STATELM_EVENT_KIND_DONE] == 1, "one DONE, got %d events",
           r.n_events);
    EXPECT(r.kinds[r.n_events - 1] == STATELM_EVENT_KIND_DONE, "DONE last");
    EXPECT(r.tokens == 8 && r.stop_reason == STATELM_STOP_REASON_MAX_TOKENS,
           "8 tokens and MAX_TOKENS, got %d and %d", r.tokens, (int)r.stop_reason);
    EXPECT(!r.on_caller_thread, "callbacks on an engine thread, never the caller's");
    EXPECT(r.misuse_free_rc == STATELM_ERR_MISUSE, "engine_free from a callback refused, got %s",
           statelm_status_name(r.misuse_free_rc));
    EXPECT(r.misuse_wait_rc == STATELM_ERR_MISUSE, "wait on own request refused, got %s",
           statelm_status_name(r.misuse_wait_rc));
    CHECK(statelm_wait(engine, req, 0)); /* waiting again gives the same answer */
    printf("  text: \"%s\"\n", r.text);
    run_destroy(&r);
}

/* 2. While session b generates (its delivery thread held at the first token): a second
 *    generation on it is BUSY, and a memory warning spills the idle session a. */
static void step_busy_and_warning(StatelmEngine *engine, uint64_t b) {
    printf("[2] memory warning while session %llu generates:\n  ", (unsigned long long)b);
    Run r, other;
    run_init(&r, engine, ACT_GATE);
    run_init(&other, engine, ACT_NONE);
    uint64_t req = 0, busy_req = 77;
    CHECK(statelm_generate(engine, b, "{\"prompt\":\"Once upon a time\"}", PROMPT_PARAMS,
                           on_event, &r, &req));
    wait_first_token(&r);
    int rc = statelm_generate(engine, b, "{\"append\":\" x\"}", NULL, on_event, &other,
                              &busy_req);
    EXPECT(rc == STATELM_ERR_BUSY && busy_req == 0, "BUSY, got %s", statelm_status_name(rc));
    printf("\n  second generation on the busy session: %s (%s)\n  ", statelm_status_name(rc),
           statelm_last_error_message());
    EXPECT(statelm_wait(engine, req, 0) == STATELM_ERR_TIMEOUT, "still running");
    CHECK(statelm_memory_warning(engine, STATELM_PRESSURE_WARNING));
    EXPECT(statelm_memory_warning(engine, 7) == STATELM_ERR_INVALID_ARGUMENT, "level 7 refused");
    wait_stat(engine, "spills", 1);
    open_gate(&r);
    CHECK(statelm_wait(engine, req, 120000));
    EXPECT(r.counts[STATELM_EVENT_KIND_DONE] == 1, "DONE");
    CHECK(statelm_memory_warning(engine, STATELM_PRESSURE_NORMAL));
    run_destroy(&r);
    run_destroy(&other);
}

/* 3. Session a's next generation reports the spill and the restore; a warning sent from its
 *    first token's callback makes it give back at least half of its cache while it runs. */
static void step_warning_active(StatelmEngine *engine, uint64_t a) {
    printf("[3] session %llu after the spill, warning mid-generation:\n  ",
           (unsigned long long)a);
    long trims = engine_stat(engine, "trims");
    Run r;
    run_init(&r, engine, ACT_WARN_AND_GATE);
    r.warn_level = STATELM_PRESSURE_WARNING;
    uint64_t req = 0;
    CHECK(statelm_generate(engine, a, "{\"append\":\" Paris. The capital of Italy is\"}",
                           "{\"max_tokens\":12,\"temperature\":0," NO_EOG "}", on_event, &r,
                           &req));
    wait_first_token(&r);
    wait_stat(engine, "trims", trims + 1);
    open_gate(&r);
    CHECK(statelm_wait(engine, req, 120000));
    int spilled = index_of(&r, STATELM_EVENT_KIND_SPILLED);
    int restored = index_of(&r, STATELM_EVENT_KIND_RESTORED);
    int trimmed = index_of(&r, STATELM_EVENT_KIND_CONTEXT_TRIMMED);
    EXPECT(spilled >= 0 && restored > spilled, "SPILLED then RESTORED (at %d, %d)", spilled,
           restored);
    EXPECT(trimmed > restored, "CONTEXT_TRIMMED for the active session (at %d)", trimmed);
    long kept = json_int(r.trim_json, "kept"), dropped = json_int(r.trim_json, "dropped");
    EXPECT(kept >= 0 && dropped > 0 && kept <= (kept + dropped) / 2,
           "at most half of the cache kept: %s", r.trim_json);
    EXPECT(r.stop_reason == STATELM_STOP_REASON_MAX_TOKENS && r.tokens == 12,
           "the trimmed generation went on to max_tokens (%d tokens)", r.tokens);
    CHECK(statelm_memory_warning(engine, STATELM_PRESSURE_NORMAL));
    run_destroy(&r);
}

/* 3b. A critical warning from the first token's callback evicts the running generation's
 *     cache (EVICTED): the generation is paused, recomputes what it had and answers in full;
 *     the session answers its next turn. */
static void step_critical(StatelmEngine *engine, uint64_t a) {
    printf("[3b] session %llu, critical warning mid-generation:\n  ", (unsigned long long)a);
    long evictions = engine_stat(engine, "evictions");
    Run r;
    run_init(&r, engine, ACT_WARN_AND_GATE);
    r.warn_level = STATELM_PRESSURE_CRITICAL;
    uint64_t req = 0;
    CHECK(statelm_generate(engine, a, "{\"append\":\" Rome. The capital of Spain is\"}",
                           "{\"max_tokens\":12,\"temperature\":0," NO_EOG "}", on_event, &r,
                           &req));
    wait_first_token(&r);
    wait_stat(engine, "evictions", evictions + 1);
    open_gate(&r);
    CHECK(statelm_wait(engine, req, 120000));
    EXPECT(index_of(&r, STATELM_EVENT_KIND_EVICTED) >= 0, "EVICTED for the active session");
    EXPECT(r.stop_reason == STATELM_STOP_REASON_MAX_TOKENS && r.tokens == 12,
           "the evicted generation went on to max_tokens (%d tokens)", r.tokens);
    char *info = NULL;
    CHECK(statelm_session_info_json(engine, a, &info));
    EXPECT(json_int(info, "state_bytes") > 0 && json_int(info, "history_tokens") > 10,
           "the cache recomputed, the history kept: %s", info);
    CHECK(statelm_string_free(info));
    CHECK(statelm_memory_warning(engine, STATELM_PRESSURE_NORMAL));
    run_destroy(&r);
    /* The next turn recomputes the history and answers. */
    Run next;
    run_init(&next, engine, ACT_NONE);
    CHECK(statelm_generate(engine, a, "{\"append\":\" Madrid.\"}",
                           "{\"max_tokens\":4,\"temperature\":0," NO_EOG "}", on_event, &next,
                           &req));
    CHECK(statelm_wait(engine, req, 120000));
    EXPECT(next.stop_reason == STATELM_STOP_REASON_MAX_TOKENS && next.tokens == 4,
           "the evicted session answers its next turn (%d tokens)", next.tokens);
    run_destroy(&next);
}

/* 4. A long generation cancelled from its first token's callback ends promptly. */
static void step_cancel(StatelmEngine *engine, uint64_t b) {
    printf("[4] cancelling a generation of 500 tokens:\n  ");
    Run r;
    run_init(&r, engine, ACT_CANCEL);
    uint64_t req = 0;
    double t0 = now_ms();
    CHECK(statelm_generate(engine, b, "{\"append\":\" and then\"}",
                           "{\"max_tokens\":500,\"temperature\":0.7,\"seed\":1," NO_EOG "}",
                           on_event, &r, &req));
    int rc = statelm_wait(engine, req, 120000);
    EXPECT(rc == STATELM_ERR_CANCELLED, "CANCELLED, got %s", statelm_status_name(rc));
    EXPECT(r.stop_reason == STATELM_STOP_REASON_CANCELLED, "DONE with stop reason CANCELLED");
    EXPECT(r.tokens >= 1 && r.tokens <= 10, "stopped within a few tokens, got %d", r.tokens);
    CHECK(statelm_cancel(engine, req)); /* cancelling a finished request is a no-op */
    printf("  cancelled after %d tokens in %.0f ms\n", r.tokens, now_ms() - t0);
    run_destroy(&r);
}

/* 5. Save and reload a session; the reloaded one continues from its state, and a follow-up
 *    turn started from the DONE callback runs on it. */
static void step_save_load(StatelmEngine *engine, uint64_t a, const char *dir) {
    printf("[5] save and reload session %llu:\n  ", (unsigned long long)a);
    char path[1024], bad[1024];
    snprintf(path, sizeof path, "%s/session-a.statelm", dir);
    snprintf(bad, sizeof bad, "%s/garbage.statelm", dir);
    CHECK(statelm_session_save(engine, a, path));
    uint64_t c = 0;
    CHECK(statelm_session_load(engine, path, &c));
    EXPECT(c != 0 && c != a, "a new session id, got %llu", (unsigned long long)c);
    char *info = NULL;
    CHECK(statelm_session_info_json(engine, c, &info));
    printf("  loaded session %llu: %s\n  ", (unsigned long long)c, info);
    EXPECT(json_int(info, "history_tokens") > 10, "the history came back");
    CHECK(statelm_string_free(info));

    Run r, next;
    run_init(&r, engine, ACT_FOLLOW_UP);
    run_init(&next, engine, ACT_NONE);
    r.follow_up = &next;
    uint64_t req = 0;
    CHECK(statelm_generate(engine, c, "{\"append\":\" The capital of Spain is\"}",
                           "{\"max_tokens\":4,\"temperature\":0," NO_EOG "}", on_event, &r,
                           &req));
    CHECK(statelm_wait(engine, req, 120000));
    EXPECT(json_int(r.done_json, "cached_tokens") > 0, "the loaded state was reused: %s",
           r.done_json);
    EXPECT(r.follow_up_rc == STATELM_OK && r.follow_up_request != 0, "follow-up from DONE: %s",
           statelm_status_name(r.follow_up_rc));
    CHECK(statelm_wait(engine, r.follow_up_request, 120000));
    EXPECT(next.tokens == 2, "the follow-up generated 2 tokens, got %d", next.tokens);

    FILE *f = fopen(bad, "wb");
    EXPECT(f != NULL, "can write %s", bad);
    fputs("not a session file", f);
    fclose(f);
    uint64_t d = 5;
    int rc = statelm_session_load(engine, bad, &d);
    EXPECT(rc == STATELM_ERR_BAD_SESSION_FILE && d == 0, "BAD_SESSION_FILE, got %s",
           statelm_status_name(rc));
    snprintf(bad, sizeof bad, "%s/missing.statelm", dir);
    rc = statelm_session_load(engine, bad, &d);
    EXPECT(rc == STATELM_ERR_IO, "IO for a missing file, got %s", statelm_status_name(rc));
    CHECK(statelm_session_close(engine, c));
    run_destroy(&r);
    run_destroy(&next);
}

/* 6. Errors: a request that cannot start fails through the return code, with no event. */
static void step_errors(StatelmEngine *engine) {
    printf("[6] errors\n");
    Run r;
    run_init(&r, engine, ACT_NONE);
    uint64_t req = 0;
    int rc = statelm_generate(engine, 1, "{\"prompt\":1}", NULL, on_event, &r, &req);
    EXPECT(rc == STATELM_ERR_INVALID_ARGUMENT, "bad input JSON, got %s", statelm_status_name(rc));
    printf("  bad input: %s\n", statelm_last_error_message());
    rc = statelm_generate(engine, 1, "{\"prompt\":\"x\"}", "{\"temprature\":0}", on_event, &r,
                          &req);
    EXPECT(rc == STATELM_ERR_INVALID_ARGUMENT, "a typo in params, got %s",
           statelm_status_name(rc));
    rc = statelm_generate(engine, 1, NULL, NULL, on_event, &r, &req);
    EXPECT(rc == STATELM_ERR_NULL_POINTER, "NULL input, got %s", statelm_status_name(rc));
    rc = statelm_generate(engine, 4242, "{\"prompt\":\"x\"}", NULL, on_event, &r, &req);
    EXPECT(rc == STATELM_ERR_UNKNOWN_SESSION && req == 0, "UNKNOWN_SESSION at once, got %s",
           statelm_status_name(rc));
    EXPECT(r.n_events == 0, "no event for a request that did not start");
    EXPECT(statelm_wait(engine, 999999, 0) == STATELM_ERR_UNKNOWN_REQUEST, "unknown request");
    EXPECT(statelm_session_new(engine, "{\"budget\":1}", &req) == STATELM_ERR_INVALID_ARGUMENT,
           "unknown session option");
    run_destroy(&r);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL.gguf WORK_DIR\n", argv[0]);
        return 2;
    }
    main_thread = pthread_self();
    const char *dir = argv[2];
    printf("statelm %s\n", statelm_version());
    char *profile = NULL;
    CHECK(statelm_device_profile_json(&profile));
    printf("device: %s\n", profile);
    CHECK(statelm_string_free(profile));
    EXPECT(statelm_string_free(profile) == STATELM_ERR_INVALID_ARGUMENT, "double free detected");
    char *tier = NULL;
    CHECK(statelm_tier_json(&tier));
    printf("tier: %s\n", tier);
    EXPECT(strstr(tier, "\"quant\"") && strstr(tier, "\"token_budget\""), "tier json: %s", tier);
    CHECK(statelm_string_free(tier));

    StatelmModel *model = (StatelmModel *)1;
    EXPECT(statelm_model_load(NULL, NULL, &model) == STATELM_ERR_NULL_POINTER && model == NULL,
           "NULL path");
    EXPECT(statelm_model_load("/nonexistent/model.gguf", NULL, &model) == STATELM_ERR_IO,
           "missing file: %s", statelm_last_error_message());
    EXPECT(statelm_model_load(argv[1], "{\"thread\":2}", &model) == STATELM_ERR_INVALID_ARGUMENT,
           "typo in options");
    CHECK(statelm_model_load(argv[1], "{\"threads\":2}", &model));

    char config[2048];
    snprintf(config, sizeof config,
             "{\"session_capacity\":512,\"idle_after_ms\":0,\"stream_buffer\":4,"
             "\"spill_dir\":\"%s/spill\",\"policy\":{\"hard_trim_suffix\":4}}",
             dir);
    StatelmEngine *engine = NULL, *wrong = NULL;
    CHECK(statelm_engine_start(model, config, &engine));
    EXPECT(statelm_engine_start((StatelmModel *)engine, NULL, &wrong) ==
               STATELM_ERR_INVALID_HANDLE,
           "an engine handle is not a model");
    uint64_t a = 0, b = 0;
    CHECK(statelm_session_new(engine, NULL, &a));
    CHECK(statelm_session_new(engine, "{\"token_budget\":256}", &b));

    step_stream(engine, a);
    step_busy_and_warning(engine, b);
    step_warning_active(engine, a);
    step_critical(engine, a);
    step_cancel(engine, b);
    step_save_load(engine, a, dir);
    step_errors(engine);

    char *stats = NULL;
    CHECK(statelm_engine_stats_json(engine, &stats));
    printf("[7] stats: %s\n", stats);
    CHECK(statelm_string_free(stats));

    /* 8. Freeing the engine cancels what still runs; its DONE arrives before free returns. */
    Run r;
    run_init(&r, engine, ACT_NONE);
    uint64_t req = 0;
    CHECK(statelm_generate(engine, b, "{\"append\":\" again\"}",
                           "{\"max_tokens\":500," NO_EOG "}", on_event, &r, &req));
    wait_first_token(&r);
    CHECK(statelm_engine_free(engine));
    EXPECT(r.finished && r.stop_reason == STATELM_STOP_REASON_CANCELLED,
           "DONE/CANCELLED delivered before engine_free returned");
    EXPECT(statelm_engine_free(engine) == STATELM_ERR_INVALID_HANDLE, "double free detected");
    EXPECT(statelm_session_new(engine, NULL, &a) == STATELM_ERR_INVALID_HANDLE, "use after free");
    CHECK(statelm_model_free(model));
    EXPECT(statelm_model_free(model) == STATELM_ERR_INVALID_HANDLE, "double free detected");
    run_destroy(&r);
    printf("\nsmoke: OK\n");
    return 0;
}
