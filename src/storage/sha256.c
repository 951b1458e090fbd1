/*
 * sha256.c — SHA-256 through OpenSSL's EVP interface: one-shot over a byte range, streamed
 * over a file, and an incremental context the encoder feeds while it writes.
 */
#include "vindex.h"
#include "vx_int.h"
#include "st.h"

#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void to_hex(const unsigned char *md, char hex[65])
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 0; i < 32; i++) {
        hex[2 * i] = digits[md[i] >> 4];
        hex[2 * i + 1] = digits[md[i] & 15];
    }
    hex[64] = '\0';
}

int vx_sha256_init(vx_sha256_ctx *ctx, vx_err *err)
{
    ctx->md = EVP_MD_CTX_new();
    if (!ctx->md || EVP_DigestInit_ex(ctx->md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(ctx->md);
        ctx->md = NULL;
        return vx_errf(err, VX_ENOMEM, "sha256: cannot create a digest context");
    }
    return 0;
}

void vx_sha256_update(vx_sha256_ctx *ctx, const void *data, size_t n)
{
    if (ctx->md && n)
        EVP_DigestUpdate(ctx->md, data, n);
}

void vx_sha256_final(vx_sha256_ctx *ctx, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    if (ctx->md && EVP_DigestFinal_ex(ctx->md, md, &len) == 1 && len == 32)
        to_hex(md, hex);
    else
        hex[0] = '\0';
    vx_sha256_free(ctx);
}

void vx_sha256_free(vx_sha256_ctx *ctx)
{
    EVP_MD_CTX_free(ctx->md);
    ctx->md = NULL;
}

void vx_sha256_hex(const void *data, size_t n, char hex[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    if (EVP_Digest(data, n, md, &len, EVP_sha256(), NULL) == 1 && len == 32)
        to_hex(md, hex);
    else
        hex[0] = '\0';
}

int vx_sha256_file(const char *path, char hex[65], vx_err *err)
{
    FILE *f = vx_fopen_regular(path, "the file to hash", err);
    if (!f)
        return -1;
    vx_sha256_ctx ctx;
    if (vx_sha256_init(&ctx, err) < 0) {
        fclose(f);
        return -1;
    }
    static _Thread_local unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        vx_sha256_update(&ctx, buf, n);
        if (vx_cancel_flag) {
            vx_sha256_free(&ctx);
            fclose(f);
            return vx_errf(err, VX_ECANCEL, "hashing '%s': cancelled", path);
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        vx_sha256_free(&ctx);
        return vx_errf(err, VX_EIO, "cannot read '%s': read error", path);
    }
    vx_sha256_final(&ctx, hex);
    return 0;
}

int vx_sha256_mapped(vx_sha256_ctx *ctx, const void *p, uint64_t n, int release,
                     const char *what, vx_err *err)
{
    const uint64_t chunk = 16u << 20;   /* Ctrl-C is seen within one slice */
    const unsigned char *b = p;
    for (uint64_t at = 0; at < n; at += chunk) {
        if (vx_cancel_flag)
            return vx_errf(err, VX_ECANCEL, "%s: cancelled", what);
        uint64_t len = n - at < chunk ? n - at : chunk;
        vx_sha256_update(ctx, b + at, (size_t)len);
        if (release)
            st_release(b + at, len);
    }
    return 0;
}

struct vx_hasher {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    vx_sha256_ctx *ctx;      /* the posted job; NULL when none is pending or running */
    const void *data;
    size_t n;
    int quit, fault;
    int posted, failed;      /* the caller's own: a job handed over since its last wait, and
                              * a fault of a job waited for but not yet reported */
};

static void *hasher_main(void *arg)
{
    vx_hasher *h = arg;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        while (!h->ctx && !h->quit)
            pthread_cond_wait(&h->cv, &h->mu);
        if (!h->ctx)
            break;
        pthread_mutex_unlock(&h->mu);
        /* volatile: it is read after the jump back */
        volatile int fault = 0;
        sigjmp_buf bus;
        if (sigsetjmp(bus, 1) == 0) {
            vx_bus_arm(&bus);
            vx_sha256_update(h->ctx, h->data, h->n);
        } else {
            fault = 1;
        }
        vx_bus_disarm();
        pthread_mutex_lock(&h->mu);
        h->fault |= fault;
        h->ctx = NULL;
        pthread_cond_broadcast(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

vx_hasher *vx_hasher_start(void)
{
    vx_hasher *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (pthread_create(&h->th, NULL, hasher_main, h) != 0) {
        pthread_cond_destroy(&h->cv);
        pthread_mutex_destroy(&h->mu);
        free(h);
        return NULL;
    }
    return h;
}

/* Below this the hand-off (a wake-up each way, tens of µs) costs about what the hash does
 * (SHA-NI: ~1.7 GB/s, 38 µs for 64 KiB): the encoder emits an MXFP4 expert row at a time,
 * 1.5 KB each, millions of them in a large MoE. */
#define POST_MIN (64u << 10)

/* Only the caller posts, so it knows without the lock whether there is a job to wait for:
 * a piece hashed inline takes no lock. The job's fault becomes the caller's, kept until
 * vx_hasher_wait reports it (a post's own wait does not drop it). */
static void settle(vx_hasher *h)
{
    if (!h->posted)
        return;
    h->posted = 0;
    pthread_mutex_lock(&h->mu);
    while (h->ctx)
        pthread_cond_wait(&h->cv, &h->mu);
    h->failed |= h->fault;
    h->fault = 0;
    pthread_mutex_unlock(&h->mu);
}

void vx_hasher_post(vx_hasher *h, vx_sha256_ctx *ctx, const void *data, size_t n)
{
    if (h)
        settle(h);   /* a context takes its bytes in order */
    if (!h || n < POST_MIN) {
        vx_sha256_update(ctx, data, n);
        return;
    }
    pthread_mutex_lock(&h->mu);
    h->data = data;
    h->n = n;
    h->ctx = ctx;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    h->posted = 1;
}

int vx_hasher_wait(vx_hasher *h)
{
    if (!h)
        return 0;
    settle(h);
    const int failed = h->failed;
    h->failed = 0;
    return failed ? -1 : 0;
}

void vx_hasher_stop(vx_hasher *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->quit = 1;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&h->mu);
    pthread_join(h->th, NULL);   /* a posted job finishes first: the loop takes it before quit */
    pthread_cond_destroy(&h->cv);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

int vx_is_sha256(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (!((s[n] >= '0' && s[n] <= '9') || (s[n] >= 'a' && s[n] <= 'f')))
            return 0;
    return n == 64;
}
