/*
 * parse.c -- the .kfg reader (kf_graph_parse) and the public printer wrapper
 * (kf_graph_print). The format is docs/kfg.md; the canonical writer is
 * ir/print.c.
 *
 *   text, len ──► lexer (one token of lookahead, never reads past len)
 *             ──► statement parser (flat: header, then one statement a line)
 *             ──► kf_ir_build / kf_ir_add_output, names through a hash table
 *
 * The grammar is flat (a statement is a line; lists hold numbers, never lists),
 * so the parser is a loop, not a recursion: no input can make it deep.
 *
 * Errors. A syntax or name error is recorded with kf_ir_fail(KF_ERR_PARSE) as
 * "LINE:COL: expected X, found Y", where Y is the offending token, quoted,
 * truncated and with unprintable bytes escaped. An error from the builder
 * (shape mismatch, bad axis, ...) keeps the builder's status and message, and
 * the parser rewrites that sticky message in place with the statement's
 * "LINE:COL: " in front (the builder's error is the first and only error: the
 * parser stops at it). Lines and columns are 1-based; columns count bytes.
 *
 * Limits, so hostile text cannot blow memory: dims are positive and their
 * product fits in int64; a const holds at most KF_PARSE_MAX_TENSOR_BYTES (an
 * input is a declaration: it allocates nothing); all constants of one text together hold at most
 * KF_PARSE_MAX_CONST_BYTES; numbers are at most 127 characters.
 *
 * Memory: the parser's own name table comes from the graph's allocator and is
 * freed before kf_graph_parse returns; everything else belongs to the graph.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ir/ir.h"

#ifndef KF_PARSE_MAX_TENSOR_BYTES
#define KF_PARSE_MAX_TENSOR_BYTES (INT64_C(1) << 30)
#endif
#define KF_PARSE_MAX_CONCAT 64 /* operands of one concat after the second */
#ifndef KF_PARSE_MAX_CONST_BYTES
#define KF_PARSE_MAX_CONST_BYTES (INT64_C(1) << 30)
#endif

/* The defaults of docs/kfg.md; ir/print.c leaves out the same values. */
#define KF_LAYER_NORM_EPS 1e-05
#define KF_RMS_NORM_EPS 1e-06

#define NAME_MAX_LEN 64
#define NUMBER_MAX_LEN 127

/* ------------------------------------------------------------------------ */
/* Lexer                                                                      */
/* ------------------------------------------------------------------------ */

typedef enum tok_kind {
    TOK_EOF,
    TOK_EOL,
    TOK_IDENT,  /* [A-Za-z_][A-Za-z0-9_]* */
    TOK_PNAME,  /* %N */
    TOK_NUMBER, /* [+-]?(D+(.D*)?|.D+)([eE][+-]?D+)?, or -inf */
    TOK_EQ,
    TOK_LPAREN,
    TOK_RPAREN,
    TOK_LBRACK,
    TOK_RBRACK,
    TOK_COMMA,
    TOK_BAD /* a byte or a run no token starts with */
} tok_kind;

typedef struct token {
    tok_kind kind;
    size_t pos, len;
    uint32_t line, col;
} token;

typedef struct lexer {
    const char *text;
    size_t len;
    size_t pos;        /* next byte to read */
    size_t line_start; /* offset of the current line's first byte */
    uint32_t line;
} lexer;

typedef struct name_entry {
    const char *s; /* into the text */
    uint32_t len;
    uint32_t line, col;
    kf_tensor *t;
} name_entry;

typedef struct parser {
    kf_graph *g;
    lexer lx;
    token tok;       /* the current token */
    size_t prev_end; /* where the token before it ended */
    name_entry *names;
    uint32_t names_cap, names_count;
    int64_t const_bytes; /* constant data so far */
} parser;

static bool is_alpha(int c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(int c) { return c >= '0' && c <= '9'; }
static bool is_ident_char(int c) { return is_alpha(c) || is_digit(c); }

static int peek_byte(const lexer *lx, size_t at) {
    return at < lx->len ? (unsigned char)lx->text[at] : -1;
}

/* The length of a run of bytes that belong to one malformed word. */
static size_t bad_run(const lexer *lx, size_t at) {
    size_t n = 0;
    for (int c; (c = peek_byte(lx, at + n)) >= 0 &&
                (is_ident_char(c) || c == '.' || c == '+' || c == '-' || c == '%');)
        n++;
    return n;
}

/* Scans a number at `at`; returns its length, or 0 when the bytes there are
 * not a well-formed number. */
static size_t scan_number(const lexer *lx, size_t at) {
    size_t i = at;
    if (peek_byte(lx, i) == '-' || peek_byte(lx, i) == '+')
        i++;
    if (lx->text[at] == '-' && peek_byte(lx, i) == 'i' && peek_byte(lx, i + 1) == 'n' &&
        peek_byte(lx, i + 2) == 'f' && !is_ident_char(peek_byte(lx, i + 3)) &&
        peek_byte(lx, i + 3) != '.')
        return 4;
    size_t digits = 0;
    while (is_digit(peek_byte(lx, i)))
        i++, digits++;
    if (peek_byte(lx, i) == '.') {
        i++;
        while (is_digit(peek_byte(lx, i)))
            i++, digits++;
    }
    if (digits == 0)
        return 0;
    if (peek_byte(lx, i) == 'e' || peek_byte(lx, i) == 'E') {
        size_t j = i + 1;
        if (peek_byte(lx, j) == '-' || peek_byte(lx, j) == '+')
            j++;
        if (!is_digit(peek_byte(lx, j)))
            return 0;
        while (is_digit(peek_byte(lx, j)))
            j++;
        i = j;
    }
    int next = peek_byte(lx, i);
    if (is_ident_char(next) || next == '.' || next == '%')
        return 0;
    return i - at;
}

/* Reads the next token into *t. */
static void lex(lexer *lx, token *t) {
    for (;;) {
        int c = peek_byte(lx, lx->pos);
        if (c == ' ' || c == '\t') {
            lx->pos++;
        } else if (c == '#') {
            /* A comment runs to the end of the line; a NUL byte in it is still
             * an error, so stop there and let it lex as a bad token. */
            while ((c = peek_byte(lx, lx->pos)) >= 0 && c != '\n' && c != '\0')
                lx->pos++;
        } else {
            break;
        }
    }
    size_t at = lx->pos;
    t->pos = at;
    t->line = lx->line;
    t->col = (uint32_t)(at - lx->line_start + 1);
    t->len = 1;
    int c = peek_byte(lx, at);
    switch (c) {
    case -1:
        t->kind = TOK_EOF;
        t->len = 0;
        return;
    case '\n':
        t->kind = TOK_EOL;
        break;
    case '\r':
        if (peek_byte(lx, at + 1) == '\n') {
            t->kind = TOK_EOL;
            t->len = 2;
        } else {
            t->kind = TOK_BAD;
        }
        break;
    case '=':
        t->kind = TOK_EQ;
        break;
    case '(':
        t->kind = TOK_LPAREN;
        break;
    case ')':
        t->kind = TOK_RPAREN;
        break;
    case '[':
        t->kind = TOK_LBRACK;
        break;
    case ']':
        t->kind = TOK_RBRACK;
        break;
    case ',':
        t->kind = TOK_COMMA;
        break;
    case '%': {
        size_t n = 1;
        while (is_digit(peek_byte(lx, at + n)))
            n++;
        int next = peek_byte(lx, at + n);
        if (n > 1 && !is_ident_char(next) && next != '.' && next != '%') {
            t->kind = TOK_PNAME;
            t->len = n;
        } else {
            t->kind = TOK_BAD;
            t->len = 1 + bad_run(lx, at + 1);
        }
        break;
    }
    default:
        if (is_alpha(c)) {
            size_t n = 1;
            while (is_ident_char(peek_byte(lx, at + n)))
                n++;
            t->kind = TOK_IDENT;
            t->len = n;
        } else if (is_digit(c) || c == '.' || c == '-' || c == '+') {
            size_t n = scan_number(lx, at);
            if (n) {
                t->kind = TOK_NUMBER;
                t->len = n;
            } else {
                t->kind = TOK_BAD;
                t->len = 1 + bad_run(lx, at + 1);
            }
        } else {
            t->kind = TOK_BAD; /* NUL, control bytes, non-ASCII, other punctuation */
        }
        break;
    }
    lx->pos = at + t->len;
    if (t->kind == TOK_EOL) {
        lx->line++;
        lx->line_start = lx->pos;
    }
}

static void next(parser *p) {
    p->prev_end = p->tok.pos + p->tok.len;
    lex(&p->lx, &p->tok);
}

/* The token after the current one, without consuming anything. */
static token peek2(const parser *p) {
    lexer copy = p->lx;
    token t;
    lex(&copy, &t);
    return t;
}

/* Whether the token two after the current one is '=' (current ',', then
 * NAME '=': an attribute, not another operand). */
static bool attr_follows(const parser *p) {
    lexer copy = p->lx;
    token t;
    lex(&copy, &t);
    lex(&copy, &t);
    return t.kind == TOK_EQ;
}

static bool tok_is(const parser *p, const token *t, const char *word) {
    size_t n = strlen(word);
    return t->kind == TOK_IDENT && t->len == n && memcmp(p->lx.text + t->pos, word, n) == 0;
}

/* ------------------------------------------------------------------------ */
/* Errors                                                                     */
/* ------------------------------------------------------------------------ */

/* Writes how a token reads in a message: 'text' (escaped, truncated), or
 * "end of line" / "end of input". */
static void describe(const parser *p, const token *t, char *buf, size_t size) {
    if (t->kind == TOK_EOF) {
        snprintf(buf, size, "end of input");
        return;
    }
    if (t->kind == TOK_EOL) {
        snprintf(buf, size, "end of line");
        return;
    }
    enum { SHOW = 32 };
    size_t n = 0;
    buf[n++] = '\'';
    for (size_t i = 0; i < t->len && i < SHOW && n + 8 < size; i++) {
        unsigned char c = (unsigned char)p->lx.text[t->pos + i];
        if (c == '\'' || c == '\\') {
            buf[n++] = '\\';
            buf[n++] = (char)c;
        } else if (c < 0x20 || c >= 0x7f) {
            n += (size_t)snprintf(buf + n, size - n, "\\x%02x", c);
        } else {
            buf[n++] = (char)c;
        }
    }
    if (t->len > SHOW && n + 4 < size) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n++] = '\'';
    buf[n] = '\0';
}

/* Records "LINE:COL: <fmt>" as a parse error at `t`; returns false. */
static bool fail_at(parser *p, const token *t, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool fail_at(parser *p, const token *t, const char *fmt, ...) {
    char msg[KF_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    kf_ir_fail(p->g, KF_ERR_PARSE, "%u:%u: %s", t->line, t->col, msg);
    return false;
}

/* "expected <what>, found <the token t>"; returns false. */
static bool expected(parser *p, const token *t, const char *what) {
    char found[160];
    describe(p, t, found, sizeof found);
    return fail_at(p, t, "expected %s, found %s", what, found);
}

/* The builder (or kf_ir_add_output) failed: put the statement's
 * position in front of its sticky message, keeping its status. */
static bool builder_failed(parser *p, const token *at) {
    kf_graph *g = p->g;
    if (KF_NEVER(g->status == KF_OK))
        kf_ir_fail(g, KF_ERR_INTERNAL, "the builder failed without a message (a kfuse bug)");
    char msg[KF_MSG_MAX];
    int n = snprintf(msg, sizeof msg, "%u:%u: ", at->line, at->col);
    size_t off = n > 0 ? (size_t)n : 0;
    size_t room = sizeof msg - off - 1;
    size_t len = strlen(g->error);
    if (len > room)
        len = room;
    memcpy(msg + off, g->error, len);
    msg[off + len] = '\0';
    memcpy(g->error, msg, off + len + 1);
    return false;
}

static bool out_of_memory(parser *p, const token *at) {
    kf_ir_fail(p->g, KF_ERR_OUT_OF_MEMORY, "%u:%u: out of memory while parsing", at->line, at->col);
    return false;
}

/* ------------------------------------------------------------------------ */
/* Names: text -> tensor, with where each was defined                         */
/* ------------------------------------------------------------------------ */

static uint32_t name_hash(const char *s, size_t len) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static name_entry *name_slot(name_entry *tab, uint32_t cap, const char *s, size_t len) {
    uint32_t i = name_hash(s, len) & (cap - 1);
    while (tab[i].s && !(tab[i].len == len && memcmp(tab[i].s, s, len) == 0))
        i = (i + 1) & (cap - 1);
    return &tab[i];
}

static const name_entry *name_find(const parser *p, const token *t) {
    if (!p->names_cap)
        return NULL;
    const name_entry *e = name_slot(p->names, p->names_cap, p->lx.text + t->pos, t->len);
    return e->s ? e : NULL;
}

/* Adds `t`'s text as a name for `tensor` (known to be new). */
static bool name_add(parser *p, const token *t, kf_tensor *tensor) {
    const kf_mem *m = &p->g->mem;
    if ((p->names_count + 1) * 2 > p->names_cap) {
        if (p->names_cap >= (UINT32_C(1) << 30))
            return out_of_memory(p, t);
        uint32_t cap = p->names_cap ? p->names_cap * 2 : 64;
        name_entry *tab = kf_mem_calloc(m, cap, sizeof *tab);
        if (!tab)
            return out_of_memory(p, t);
        for (uint32_t i = 0; i < p->names_cap; i++)
            if (p->names[i].s)
                *name_slot(tab, cap, p->names[i].s, p->names[i].len) = p->names[i];
        kf_mem_free(m, p->names, (size_t)p->names_cap * sizeof *p->names);
        p->names = tab;
        p->names_cap = cap;
    }
    name_entry *e = name_slot(p->names, p->names_cap, p->lx.text + t->pos, t->len);
    e->s = p->lx.text + t->pos;
    e->len = (uint32_t)t->len;
    e->line = t->line;
    e->col = t->col;
    e->t = tensor;
    p->names_count++;
    return true;
}

/* The tensor the current token names (and consumes it). */
static bool parse_ref(parser *p, const char *what, kf_tensor **out) {
    if (p->tok.kind != TOK_IDENT && p->tok.kind != TOK_PNAME)
        return expected(p, &p->tok, what);
    const name_entry *e = name_find(p, &p->tok);
    if (!e)
        return expected(p, &p->tok, "a name defined above");
    *out = e->t;
    next(p);
    return true;
}

/* Copies an identifier token (at most NAME_MAX_LEN bytes) into buf. */
static void copy_name(const parser *p, const token *t, char *buf) {
    memcpy(buf, p->lx.text + t->pos, t->len);
    buf[t->len] = '\0';
}

/* ------------------------------------------------------------------------ */
/* Numbers                                                                    */
/* ------------------------------------------------------------------------ */

/* True when the current token is an integer literal ([+-]?digits) that fits in
 * int64; stores it. Does not consume. */
static bool tok_int(const parser *p, int64_t *out) {
    const token *t = &p->tok;
    if (t->kind != TOK_NUMBER)
        return false;
    const char *s = p->lx.text + t->pos;
    size_t i = 0;
    bool neg = false;
    if (s[0] == '-' || s[0] == '+')
        neg = s[i++] == '-';
    if (i == t->len)
        return false;
    uint64_t v = 0;
    for (; i < t->len; i++) {
        if (!is_digit(s[i]))
            return false;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > ((uint64_t)INT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = neg ? -(int64_t)v : (int64_t)v;
    return true;
}

/* True when the current token is a number (or inf/nan) within double's range;
 * stores it. Does not consume. */
static bool tok_float(const parser *p, double *out) {
    const token *t = &p->tok;
    if (tok_is(p, t, "inf")) {
        *out = INFINITY;
        return true;
    }
    if (tok_is(p, t, "nan")) {
        *out = NAN;
        return true;
    }
    if (t->kind != TOK_NUMBER || t->len > NUMBER_MAX_LEN)
        return false;
    char buf[NUMBER_MAX_LEN + 1];
    memcpy(buf, p->lx.text + t->pos, t->len);
    buf[t->len] = '\0';
    char *end;
    errno = 0;
    double v = strtod(buf, &end);
    if (end != buf + t->len)
        return false;
    if (errno == ERANGE && isinf(v))
        return false; /* overflow; underflow to a subnormal or zero is fine */
    *out = v;
    return true;
}

/* An integer in [lo, hi]; `what` names it in the message. Consumes it. */
static bool parse_int(parser *p, int64_t lo, int64_t hi, const char *what, int64_t *out) {
    int64_t v;
    if (!tok_int(p, &v) || v < lo || v > hi)
        return expected(p, &p->tok, what);
    *out = v;
    next(p);
    return true;
}

static bool parse_bool(parser *p, bool *out) {
    if (tok_is(p, &p->tok, "true"))
        *out = true;
    else if (tok_is(p, &p->tok, "false"))
        *out = false;
    else
        return expected(p, &p->tok, "true or false");
    next(p);
    return true;
}

/* One element of a const of dtype d. Consumes it. */
static bool parse_value(parser *p, kf_dtype d, double *out) {
    char what[96];
    if (d == KF_DTYPE_BOOL) {
        int64_t v;
        if (tok_is(p, &p->tok, "true") || tok_is(p, &p->tok, "false"))
            v = tok_is(p, &p->tok, "true");
        else if (!tok_int(p, &v) || (v != 0 && v != 1))
            return expected(p, &p->tok, "a bool value (0, 1, true or false)");
        *out = (double)v;
    } else if (d == KF_DTYPE_I32) {
        int64_t v;
        if (!tok_int(p, &v) || v < INT32_MIN || v > INT32_MAX)
            return expected(p, &p->tok, "an i32 value (an integer from -2147483648 to 2147483647)");
        *out = (double)v;
    } else if (d == KF_DTYPE_I64) {
        int64_t v;
        if (!tok_int(p, &v) || v < -(INT64_C(1) << 53) || v > (INT64_C(1) << 53))
            return expected(p, &p->tok, "an i64 value (an integer of magnitude at most 2^53)");
        *out = (double)v;
    } else {
        double v;
        snprintf(what, sizeof what, "a value of %s (a number, inf, -inf or nan)", kf_dtype_name(d));
        if (!tok_float(p, &v))
            return expected(p, &p->tok, what);
        if (isfinite(v) && isinf(kf_ir_round(d, v))) {
            snprintf(what, sizeof what, "a value within the range of %s", kf_dtype_name(d));
            return expected(p, &p->tok, what);
        }
        *out = v;
    }
    next(p);
    return true;
}

/* ------------------------------------------------------------------------ */
/* Statements                                                                 */
/* ------------------------------------------------------------------------ */

static bool expect(parser *p, tok_kind kind, const char *what) {
    if (p->tok.kind != kind)
        return expected(p, &p->tok, what);
    next(p);
    return true;
}

static bool at_line_end(const parser *p) {
    return p->tok.kind == TOK_EOL || p->tok.kind == TOK_EOF;
}

static bool parse_dtype(parser *p, kf_dtype *out) {
    kf_dtype d = KF_DTYPE_COUNT;
    if (p->tok.kind == TOK_IDENT)
        d = kf_dtype_from_name(p->lx.text + p->tok.pos, p->tok.len);
    if (d == KF_DTYPE_COUNT)
        return expected(p, &p->tok, "a dtype (f32, f16, bf16, f64, i32, bool or i64)");
    *out = d;
    next(p);
    return true;
}

/* '[' INT (',' INT)* ']' or '[' ']': at most KF_MAX_RANK integers, each one in
 * [lo, hi] (and not 0 unless allow_zero). `item` names one entry in messages. */
static bool parse_int_list(parser *p, int64_t lo, int64_t hi, bool allow_zero, const char *item,
                           int64_t *vals, int *count) {
    char what[96];
    if (!expect(p, TOK_LBRACK, "'['"))
        return false;
    int n = 0;
    if (p->tok.kind != TOK_RBRACK) {
        for (;;) {
            if (n == KF_MAX_RANK) {
                snprintf(what, sizeof what, "']' after at most %d entries", KF_MAX_RANK);
                return expected(p, &p->tok, what);
            }
            token at = p->tok;
            if (!parse_int(p, lo, hi, item, &vals[n]))
                return false;
            if (!allow_zero && vals[n] == 0)
                return expected(p, &at, item);
            n++;
            if (p->tok.kind == TOK_RBRACK)
                break;
            if (!expect(p, TOK_COMMA, "',' or ']'"))
                return false;
        }
    }
    next(p); /* ']' */
    *count = n;
    return true;
}

/* DTYPE '[' DIMS ']'; stores the element count in *numel. Only a const's data
 * is capped (KF_PARSE_MAX_TENSOR_BYTES): it is stored in the graph. An input or
 * an iota is a declaration that allocates nothing, so its size is bounded only
 * by the builder's element limit (a decode KV cache of 4 GiB is a fine input). */
static bool parse_type(parser *p, kf_op op, kf_node_args *a, int64_t *numel) {
    token start = p->tok;
    if (!parse_dtype(p, &a->dtype))
        return false;
    if (!parse_int_list(p, 1, INT64_MAX, false, "a dim (a positive integer)", a->dims, &a->rank))
        return false;
    token whole = start; /* the type's text, for messages */
    whole.len = p->prev_end - start.pos;
    int64_t n = 1;
    for (int i = 0; i < a->rank; i++) {
        if (n > INT64_MAX / a->dims[i])
            return expected(p, &whole, "a type whose element count fits in 64 bits");
        n *= a->dims[i];
    }
    if (op == KF_OP_CONST && n > KF_PARSE_MAX_TENSOR_BYTES / (int64_t)kf_dtype_size(a->dtype)) {
        char what[96];
        snprintf(what, sizeof what, "a const of at most %lld MiB (make larger data a graph input)",
                 (long long)(KF_PARSE_MAX_TENSOR_BYTES >> 20));
        return expected(p, &whole, what);
    }
    *numel = n;
    return true;
}

/* The attributes of each form, in canonical order. */
enum {
    ATTR_AXIS,
    ATTR_KEEPDIM,
    ATTR_EPS,
    ATTR_TRANSPOSE_A,
    ATTR_TRANSPOSE_B,
    ATTR_MIN,
    ATTR_MAX,
    ATTR_START,
    ATTR_STOP,
    ATTR_STEP,
    ATTR_TIMES,
    ATTR_COUNT
};
static const char *const attr_names[ATTR_COUNT] = {
    "axis", "keepdim", "eps", "transpose_a", "transpose_b", "min", "max", "start", "stop", "step", "times"};

static unsigned form_attrs(kf_form form) {
    switch (form) {
    case KF_FORM_IOTA:
    case KF_FORM_SOFTMAX:
    case KF_FORM_CONCAT:
    case KF_FORM_GATHER:
        return 1u << ATTR_AXIS;
    case KF_FORM_SLICE:
        return 1u << ATTR_AXIS | 1u << ATTR_START | 1u << ATTR_STOP | 1u << ATTR_STEP;
    case KF_FORM_REPEAT:
        return 1u << ATTR_AXIS | 1u << ATTR_TIMES;
    case KF_FORM_REDUCE:
        return 1u << ATTR_AXIS | 1u << ATTR_KEEPDIM;
    case KF_FORM_LAYER_NORM:
    case KF_FORM_RMS_NORM:
        return 1u << ATTR_AXIS | 1u << ATTR_EPS;
    case KF_FORM_MATMUL:
        return 1u << ATTR_TRANSPOSE_A | 1u << ATTR_TRANSPOSE_B;
    case KF_FORM_CLAMP:
        return 1u << ATTR_MIN | 1u << ATTR_MAX;
    default:
        return 0;
    }
}

static unsigned form_required_attrs(kf_form form) {
    if (form == KF_FORM_REPEAT)
        return 1u << ATTR_AXIS | 1u << ATTR_TIMES;
    return form == KF_FORM_IOTA || form == KF_FORM_REDUCE || form == KF_FORM_SLICE ||
                   form == KF_FORM_CONCAT || form == KF_FORM_GATHER
               ? 1u << ATTR_AXIS
               : 0;
}

/* Lists the attributes in `mask` ("axis, keepdim") into buf. */
static void attr_list(unsigned mask, char *buf, size_t size) {
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; i < ATTR_COUNT; i++)
        if (mask & (1u << i)) {
            int w = snprintf(buf + n, size - n, "%s%s", n ? ", " : "", attr_names[i]);
            if (w > 0 && (size_t)w < size - n)
                n += (size_t)w;
        }
}

/* ', key=value' ... up to ')' (not consumed). */
static bool parse_attrs(parser *p, const kf_op_info *info, kf_node_args *a) {
    unsigned allowed = form_attrs(info->form), seen = 0;
    char what[160], list[96];
    attr_list(allowed, list, sizeof list);
    while (p->tok.kind != TOK_RPAREN) {
        if (!allowed) {
            snprintf(what, sizeof what, "')' after the arguments of %s", info->name);
            return expected(p, &p->tok, what);
        }
        if (p->tok.kind != TOK_COMMA) {
            snprintf(what, sizeof what, "',' or ')' after %s",
                     seen ? "an attribute" : "an operand");
            return expected(p, &p->tok, what);
        }
        next(p);
        token key = p->tok;
        int k = 0;
        while (k < ATTR_COUNT && !tok_is(p, &key, attr_names[k]))
            k++;
        if (k == ATTR_COUNT || !(allowed & (1u << k))) {
            snprintf(what, sizeof what, "an attribute of %s (%s)", info->name, list);
            return expected(p, &key, what);
        }
        if (seen & (1u << k)) {
            snprintf(what, sizeof what, "each attribute of %s at most once", info->name);
            return expected(p, &key, what);
        }
        seen |= 1u << k;
        next(p);
        if (!expect(p, TOK_EQ, "'=' after the attribute name"))
            return false;
        int64_t v = 0;
        switch (k) {
        case ATTR_AXIS:
            if (!parse_int(p, INT_MIN, INT_MAX, "an axis (an integer)", &v))
                return false;
            a->axis = (int)v;
            break;
        case ATTR_KEEPDIM:
            if (!parse_bool(p, &a->keepdim))
                return false;
            break;
        case ATTR_EPS:
            if (!tok_float(p, &a->eps))
                return expected(p, &p->tok, "a number for eps");
            next(p);
            break;
        case ATTR_TRANSPOSE_A:
            if (!parse_bool(p, &a->transpose_a))
                return false;
            break;
        case ATTR_TRANSPOSE_B:
            if (!parse_bool(p, &a->transpose_b))
                return false;
            break;
        case ATTR_START:
        case ATTR_STOP:
        case ATTR_STEP:
            if (!parse_int(p, INT64_MIN, INT64_MAX, "an integer", &v))
                return false;
            *(k == ATTR_START ? &a->start : k == ATTR_STOP ? &a->stop : &a->step) = v;
            break;
        case ATTR_TIMES:
            if (!parse_int(p, INT64_MIN, INT64_MAX, "an integer", &v))
                return false;
            a->times = v;
            break;
        case ATTR_MIN:
        case ATTR_MAX:
            if (!tok_float(p, k == ATTR_MIN ? &a->lo : &a->hi))
                return expected(p, &p->tok, "a number (or inf, -inf) for a bound of clamp");
            next(p);
            break;
        }
    }
    if (info->form == KF_FORM_CLAMP && !(seen & (1u << ATTR_MIN | 1u << ATTR_MAX))) {
        snprintf(what, sizeof what, "',' and attribute min=... or max=... of %s", info->name);
        return expected(p, &p->tok, what);
    }
    unsigned missing = form_required_attrs(info->form) & ~seen;
    if (missing) {
        attr_list(missing, list, sizeof list);
        snprintf(what, sizeof what, "',' and attribute %s=... of %s", list, info->name);
        return expected(p, &p->tok, what);
    }
    return true;
}

/* Fills a built const's data from ', VALUE' or ', [VALUES]'. */
static bool parse_const_values(parser *p, kf_tensor *t) {
    int64_t numel = kf_ir_numel(t);
    size_t esize = kf_dtype_size(t->dtype);
    if (!expect(p, TOK_COMMA, "',' and the constant's value"))
        return false;
    int64_t n = 0;
    double v;
    if (p->tok.kind == TOK_LBRACK) {
        next(p);
        for (;;) {
            if (n == numel) {
                char what[96];
                snprintf(what, sizeof what, "']' after %lld value%s", (long long)numel,
                         numel == 1 ? "" : "s");
                return expected(p, &p->tok, what);
            }
            if (!parse_value(p, t->dtype, &v))
                return false;
            kf_ir_store(t->data, t->dtype, n, v);
            n++;
            if (p->tok.kind == TOK_RBRACK)
                break;
            if (!expect(p, TOK_COMMA, "',' or ']' after a value"))
                return false;
        }
        if (n != numel && n != 1) {
            char what[96];
            snprintf(what, sizeof what, "%lld values (or one, to fill the shape)",
                     (long long)numel);
            return fail_at(p, &p->tok, "expected %s, found %lld", what, (long long)n);
        }
        next(p); /* ']' */
    } else {
        if (!parse_value(p, t->dtype, &v))
            return false;
        kf_ir_store(t->data, t->dtype, 0, v);
        n = 1;
    }
    if (n == 1 && numel > 1) {
        /* Splat: double the filled prefix until the buffer is full. */
        size_t total = (size_t)numel * esize, done = esize;
        char *d = t->data;
        while (done < total) {
            size_t c = done < total - done ? done : total - done;
            memcpy(d + done, d, c);
            done += c;
        }
    }
    return true;
}

/* NAME '=' OP '(' ARGS ')' */
static bool parse_definition(parser *p) {
    token name = p->tok;
    if (name.kind != TOK_IDENT && name.kind != TOK_PNAME)
        return expected(p, &name, "a name or 'output'");
    if (name.kind == TOK_IDENT && name.len > NAME_MAX_LEN)
        return expected(p, &name, "a name of at most 64 characters");
    const name_entry *prev = name_find(p, &name);
    if (prev) {
        char found[160];
        describe(p, &name, found, sizeof found);
        return fail_at(p, &name, "expected a new name, found %s (defined at %u:%u)", found,
                       prev->line, prev->col);
    }
    next(p);
    if (!expect(p, TOK_EQ, "'='"))
        return false;
    token optok = p->tok;
    kf_op op = KF_OP_COUNT;
    if (optok.kind == TOK_IDENT)
        op = kf_op_from_name(p->lx.text + optok.pos, optok.len);
    if (op == KF_OP_COUNT)
        return expected(p, &optok, "an op name");
    const kf_op_info *info = kf_op_get(op);
    next(p);
    if (!expect(p, TOK_LPAREN, "'('"))
        return false;

    kf_node_args a;
    memset(&a, 0, sizeof a);
    a.axis = -1;
    a.eps = op == KF_OP_LAYER_NORM ? KF_LAYER_NORM_EPS : KF_RMS_NORM_EPS;
    a.lo = -INFINITY; /* clamp: an absent bound is unbounded */
    a.hi = INFINITY;
    a.stop = INT64_MAX; /* slice: to the end unless stop= says otherwise */
    a.step = 1;
    char namebuf[NAME_MAX_LEN + 1];
    char what[96];

    /* Sources start with the type; the rest with their tensor operands. */
    int arity = kf_form_arity(info->form);
    int64_t numel = 0;
    if (arity == 0) {
        if (!parse_type(p, op, &a, &numel))
            return false;
    }
    for (int i = 0; i < arity; i++) {
        if (i > 0 && p->tok.kind != TOK_COMMA) {
            snprintf(what, sizeof what, "',' and operand %d of %s", i + 1, info->name);
            return expected(p, &p->tok, what);
        }
        if (i > 0)
            next(p);
        snprintf(what, sizeof what, "operand %d of %s (a name)", i + 1, info->name);
        if (!parse_ref(p, what, &a.src[i]))
            return false;
    }

    /* concat takes two or more operands: each one after the second nests,
     * concat(concat(a, b), c), the intermediate unnamed. Its axis comes after
     * the operands, so the extra ones are kept until it is known. */
    kf_tensor *more[KF_PARSE_MAX_CONCAT];
    int n_more = 0;
    while (info->form == KF_FORM_CONCAT && p->tok.kind == TOK_COMMA &&
           (peek2(p).kind == TOK_PNAME || (peek2(p).kind == TOK_IDENT && !attr_follows(p)))) {
        if (n_more == KF_PARSE_MAX_CONCAT)
            return expected(p, &p->tok, "at most 66 operands of concat");
        next(p);
        snprintf(what, sizeof what, "operand %d of %s (a name)", n_more + 3, info->name);
        if (!parse_ref(p, what, &more[n_more]))
            return false;
        n_more++;
    }

    /* Positional extras. */
    kf_tensor *built = NULL;
    token list_at;
    switch (info->form) {
    case KF_FORM_INPUT:
        if (name.kind != TOK_IDENT)
            return expected(p, &name, "an identifier naming the input");
        copy_name(p, &name, namebuf);
        a.name = namebuf;
        break;
    case KF_FORM_CONST:
        /* Build first (zeroed), then read the values straight into its data:
         * a big splat never needs a second buffer. */
        if (numel * (int64_t)kf_dtype_size(a.dtype) > KF_PARSE_MAX_CONST_BYTES - p->const_bytes) {
            return fail_at(p, &optok,
                           "const: the constants of one text hold at most %lld MiB in all; make "
                           "large constants graph inputs",
                           (long long)(KF_PARSE_MAX_CONST_BYTES >> 20));
        }
        built = kf_ir_build(p->g, op, &a);
        if (!built)
            return builder_failed(p, &optok);
        p->const_bytes += numel * (int64_t)kf_dtype_size(a.dtype);
        if (!parse_const_values(p, built))
            return false;
        break;
    case KF_FORM_CAST:
        if (!expect(p, TOK_COMMA, "',' and the target dtype") || !parse_dtype(p, &a.dtype))
            return false;
        break;
    case KF_FORM_RESHAPE:
        if (!expect(p, TOK_COMMA, "',' and the new dims"))
            return false;
        list_at = p->tok;
        if (!parse_int_list(p, -1, INT64_MAX, false, "a dim (a positive integer or -1)", a.dims,
                            &a.rank))
            return false;
        {
            int64_t known = 1;
            for (int i = 0; i < a.rank; i++) {
                if (a.dims[i] < 0)
                    continue;
                if (known > INT64_MAX / a.dims[i])
                    return expected(p, &list_at, "dims whose product fits in 64 bits");
                known *= a.dims[i];
            }
        }
        break;
    case KF_FORM_EXPAND:
        if (!expect(p, TOK_COMMA, "',' and the target dims"))
            return false;
        if (!parse_int_list(p, 1, INT64_MAX, false, "a dim (a positive integer)", a.dims, &a.rank))
            return false;
        break;
    case KF_FORM_PERMUTE: {
        if (!expect(p, TOK_COMMA, "',' and the permutation"))
            return false;
        list_at = p->tok;
        int64_t perm[KF_MAX_RANK];
        int n;
        if (!parse_int_list(p, INT_MIN, INT_MAX, true, "an axis (an integer)", perm, &n))
            return false;
        if (n != a.src[0]->rank) {
            char type[128];
            kf_ir_type_str(a.src[0], type, sizeof type);
            return fail_at(p, &list_at,
                           "expected a permutation of the %d axes of operand x %s, found %d "
                           "entries",
                           a.src[0]->rank, type, n);
        }
        for (int i = 0; i < n; i++)
            a.perm[i] = (int)perm[i];
        break;
    }
    default:
        break;
    }

    if (!parse_attrs(p, info, &a))
        return false;
    next(p); /* ')' */
    if (!at_line_end(p))
        return expected(p, &p->tok, "end of line after ')'");

    if (!built) {
        built = kf_ir_build(p->g, op, &a);
        for (int i = 0; i < n_more && built; i++) {
            a.src[0] = built;
            a.src[1] = more[i];
            built = kf_ir_build(p->g, op, &a);
        }
        if (!built)
            return builder_failed(p, &optok);
    }
    if (name.kind == TOK_IDENT && op != KF_OP_INPUT) {
        /* What kf_ir_set_name does, less its uniqueness check: that is a linear
         * scan of the graph (quadratic over a file), and the name table has
         * already made sure no tensor has this name. */
        KF_ASSERT(kf_ir_is_identifier(p->lx.text + name.pos, name.len));
        char *copy = kf_arena_strndup(&p->g->arena, p->lx.text + name.pos, name.len);
        if (!copy)
            return out_of_memory(p, &name);
        built->name = copy;
    }
    return name_add(p, &name, built);
}

/* 'output' NAME | 'output' OUT '=' NAME */
static bool parse_output(parser *p) {
    next(p); /* 'output' */
    token first = p->tok;
    if (first.kind != TOK_IDENT && first.kind != TOK_PNAME)
        return expected(p, &first, "an output name");
    if (peek2(p).kind == TOK_EQ) {
        if (first.kind != TOK_IDENT || first.len > NAME_MAX_LEN)
            return expected(p, &first, "an identifier of at most 64 characters for the output");
        next(p);
        next(p);
    }
    kf_tensor *t;
    if (!parse_ref(p, "a name", &t))
        return false;
    if (!at_line_end(p))
        return expected(p, &p->tok, "end of line after the output");
    if (first.kind != TOK_IDENT || first.len > NAME_MAX_LEN) {
        char found[160];
        describe(p, &first, found, sizeof found);
        return fail_at(p, &first,
                       "expected an identifier of at most 64 characters for the output, found "
                       "%s (write 'output NAME = %.*s')",
                       found, first.len > 32 ? 32 : (int)first.len, p->lx.text + first.pos);
    }
    char namebuf[NAME_MAX_LEN + 1];
    copy_name(p, &first, namebuf);
    if (kf_ir_add_output(p->g, namebuf, t) != KF_OK)
        return builder_failed(p, &first);
    return true;
}

static void skip_blank_lines(parser *p) {
    while (p->tok.kind == TOK_EOL)
        next(p);
}

static bool parse_file(parser *p) {
    next(p);
    skip_blank_lines(p);
    if (!tok_is(p, &p->tok, "kfg"))
        return expected(p, &p->tok, "the header 'kfg 1'");
    next(p);
    int64_t version;
    if (!tok_int(p, &version) || version != 1)
        return expected(p, &p->tok, "format version 1");
    next(p);
    if (!at_line_end(p))
        return expected(p, &p->tok, "end of line after 'kfg 1'");
    for (;;) {
        skip_blank_lines(p);
        if (p->tok.kind == TOK_EOF)
            return true;
        bool ok;
        if (tok_is(p, &p->tok, "output") && peek2(p).kind != TOK_EQ)
            ok = parse_output(p);
        else
            ok = parse_definition(p);
        if (!ok)
            return false;
    }
}

/* ------------------------------------------------------------------------ */
/* Public                                                                     */
/* ------------------------------------------------------------------------ */

kf_status kf_graph_parse(kf_ctx *ctx, const char *text, size_t len, kf_graph **out) {
    if (out)
        *out = NULL;
    if (!ctx || !text || !out)
        return KF_ERR_INVALID_ARGUMENT;
    kf_graph *g = NULL;
    kf_status st = kf_graph_create(ctx, &g);
    if (st != KF_OK)
        return st;
    *out = g;
    parser p;
    memset(&p, 0, sizeof p);
    p.g = g;
    p.lx.text = text;
    p.lx.len = len;
    p.lx.line = 1;
    bool ok = parse_file(&p);
    kf_mem_free(&g->mem, p.names, (size_t)p.names_cap * sizeof *p.names);
    if (!ok && KF_NEVER(g->status == KF_OK))
        kf_ir_fail(g, KF_ERR_INTERNAL, "parse failed without a message (a kfuse bug)");
    return g->status;
}

kf_status kf_graph_print(const kf_graph *graph, FILE *out) {
    if (!graph || !out)
        return KF_ERR_INVALID_ARGUMENT;
    return kf_ir_print(graph, out);
}
