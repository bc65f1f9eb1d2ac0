/*
 * mem.c -- every byte kfuse allocates goes through the context's allocator
 * hooks (kf_mem), so a caller can account for it and tests can fail any one
 * allocation. The arena gives graphs one-shot lifetime: tensors, names and
 * constant data are freed together when the graph is destroyed.
 */
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

static void *libc_alloc(void *user, size_t size) {
    (void)user;
    return malloc(size);
}

static void *libc_realloc(void *user, void *ptr, size_t old_size, size_t new_size) {
    (void)user;
    (void)old_size;
    return realloc(ptr, new_size);
}

static void libc_free(void *user, void *ptr, size_t size) {
    (void)user;
    (void)size;
    free(ptr);
}

void kf_mem_resolve(kf_mem *out, const kf_allocator *a) {
    if (a && a->alloc && a->realloc && a->free) {
        *out = *a;
        return;
    }
    out->alloc = libc_alloc;
    out->realloc = libc_realloc;
    out->free = libc_free;
    out->user = NULL;
}

void *kf_mem_alloc(const kf_mem *m, size_t size) {
    if (size == 0)
        size = 1;
    return m->alloc(m->user, size);
}

void *kf_mem_calloc(const kf_mem *m, size_t count, size_t size) {
    if (size != 0 && count > SIZE_MAX / size)
        return NULL;
    void *p = kf_mem_alloc(m, count * size);
    if (p)
        memset(p, 0, count * size);
    return p;
}

void *kf_mem_realloc(const kf_mem *m, void *ptr, size_t old_size, size_t new_size) {
    if (!ptr)
        return kf_mem_alloc(m, new_size);
    if (new_size == 0)
        new_size = 1;
    return m->realloc(m->user, ptr, old_size, new_size);
}

void kf_mem_free(const kf_mem *m, void *ptr, size_t size) {
    if (ptr)
        m->free(m->user, ptr, size ? size : 1);
}

bool kf_mem_grow(const kf_mem *m, void **items, uint32_t *cap, uint32_t need, size_t elem) {
    if (need <= *cap)
        return true;
    uint32_t ncap = *cap ? *cap : 8;
    while (ncap < need) {
        if (ncap > UINT32_MAX / 2)
            return false;
        ncap *= 2;
    }
    if ((size_t)ncap > SIZE_MAX / elem)
        return false;
    void *p = kf_mem_realloc(m, *items, (size_t)*cap * elem, (size_t)ncap * elem);
    if (!p)
        return false;
    *items = p;
    *cap = ncap;
    return true;
}

/* ------------------------------------------------------------------------ */

#define KF_ARENA_BLOCK 16384

struct kf_arena_block {
    kf_arena_block *next;
    size_t size; /* bytes of data[] */
    size_t used;
    _Alignas(16) unsigned char data[];
};

void kf_arena_init(kf_arena *a, const kf_mem *mem) {
    a->mem = mem;
    a->head = NULL;
}

void *kf_arena_alloc(kf_arena *a, size_t size) {
    size_t need = (size + 15) & ~(size_t)15;
    if (need < size)
        return NULL;
    kf_arena_block *b = a->head;
    if (!b || b->size - b->used < need) {
        size_t bsize = need > KF_ARENA_BLOCK / 2 ? need : KF_ARENA_BLOCK;
        if (bsize > SIZE_MAX - sizeof(kf_arena_block))
            return NULL;
        kf_arena_block *nb = kf_mem_alloc(a->mem, sizeof(kf_arena_block) + bsize);
        if (!nb)
            return NULL;
        nb->size = bsize;
        nb->used = 0;
        /* A large one-off block goes behind the head so the head's free space
         * stays usable for the small allocations that follow. */
        if (b && bsize != KF_ARENA_BLOCK) {
            nb->next = b->next;
            b->next = nb;
        } else {
            nb->next = b;
            a->head = nb;
        }
        b = nb;
    }
    void *p = b->data + b->used;
    b->used += need;
    memset(p, 0, size);
    return p;
}

char *kf_arena_strndup(kf_arena *a, const char *s, size_t len) {
    char *p = kf_arena_alloc(a, len + 1);
    if (p) {
        memcpy(p, s, len);
        p[len] = '\0';
    }
    return p;
}

void kf_arena_release(kf_arena *a) {
    kf_arena_block *b = a->head;
    while (b) {
        kf_arena_block *next = b->next;
        kf_mem_free(a->mem, b, sizeof(kf_arena_block) + b->size);
        b = next;
    }
    a->head = NULL;
}
