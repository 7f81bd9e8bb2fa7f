/* The library's one JSON reader and string writer (common/json.c) as the warm part and the tools
 * use them: an object server's answer read for one string (also when the text is cut after it),
 * a store's "build" text walked value by value and its top-level members found, and strings
 * written back escaped. */
#include "common.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

Test(warm_json, find_string_at_any_depth_or_at_the_top)
{
    char out[64];
    const char *gcs = "{\"error\": {\"code\": 403, \"message\": \"Invalid \\\"x\\\" \\u0041\\n\"}}";
    cr_assert(dlc__json_find_string(gcs, strlen(gcs), "message", 1, out, sizeof out));
    cr_assert_str_eq(out, "Invalid \"x\" A\n");
    cr_assert_not(dlc__json_find_string(gcs, strlen(gcs), "message", 0, out, sizeof out));
    /* The first member of that name decides, even when its value is no string. */
    const char *num = "{\"size\": 12, \"x\": {\"size\": \"13\"}}";
    cr_assert_not(dlc__json_find_string(num, strlen(num), "size", 1, out, sizeof out));
    /* A value that is not the member's name is not the member. */
    const char *val = "{\"name\": \"etag\", \"etag\": \"\\\"abc\\\"\"}";
    cr_assert(dlc__json_find_string(val, strlen(val), "etag", 1, out, sizeof out));
    cr_assert_str_eq(out, "\"abc\"");
    /* A text cut after the member still gives it; one cut inside it does not. */
    const char *cut = "{\"access_token\": \"ya29.tok\", \"expires_in\": 35";
    cr_assert(dlc__json_find_string(cut, strlen(cut), "access_token", 1, out, sizeof out));
    cr_assert_str_eq(out, "ya29.tok");
    cr_assert_not(dlc__json_find_string(cut, 24, "access_token", 1, out, sizeof out));
    /* A value longer than the room for it is not handed out cut. */
    cr_assert_not(dlc__json_find_string(cut, strlen(cut), "access_token", 1, out, 5));
    cr_assert_not(dlc__json_find_string("<html>", 6, "message", 1, out, sizeof out));
}

typedef struct seen {
    char line[16][64];
    int n;
} seen;

static int record(void *user, const dlc__json_item *it)
{
    seen *s = user;
    char v[32] = "";
    if (it->kind == DLC__JSON_STRING)
        snprintf(v, sizeof v, "'%s'", it->str);
    else if (it->kind == DLC__JSON_INT)
        snprintf(v, sizeof v, "%lld", it->i);
    else if (it->kind == DLC__JSON_DOUBLE)
        snprintf(v, sizeof v, "%g", it->d);
    else if (it->kind == DLC__JSON_BOOL)
        snprintf(v, sizeof v, "%s", it->b ? "true" : "false");
    if (s->n < 16)
        snprintf(s->line[s->n++], sizeof s->line[0], "%d %d %s %s", it->depth, (int)it->kind,
                 it->key ? it->key : "-", v);
    return 0;
}

Test(warm_json, walk_reports_every_value_in_order)
{
    const char *t = " {\"a\": [1, 2.5, \"s\"], \"b\": {\"c\": true, \"d\": null}} ";
    seen s = {.n = 0};
    const char *after = NULL;
    cr_assert_eq(dlc__json_walk(t, t + strlen(t), record, &s, &after), 0);
    cr_assert_eq(*after, ' ');
    const char *want[] = {"0 5 - ", "1 6 a ",     "2 2 - 1", "2 3 - 2.5", "2 4 - 's'", "1 8 a ",
                          "1 5 b ", "2 1 c true", "2 0 d ",  "1 7 b ",    "0 7 - "};
    cr_assert_eq(s.n, 11);
    for (int i = 0; i < 11; i++)
        cr_assert_str_eq(s.line[i], want[i], "item %d", i);
    cr_assert(dlc__json_valid(t, strlen(t)));
    cr_assert_not(dlc__json_valid("{\"a\": 1} x", 10));
    cr_assert(dlc__json_valid("{\"a\": 99999999999999999999}", 27)); /* a double to readers */
    cr_assert_not(dlc__json_valid("[\"\x01\"]", 5));
    char deep[64] = "";
    for (int i = 0; i < 20; i++)
        strcat(deep, "[");
    cr_assert_eq(dlc__json_walk(deep, deep + strlen(deep), NULL, NULL, NULL), -1);
}

Test(warm_json, numbers_are_rfc_8259s)
{
    /* strtod() takes all of the refused ones; Python's json and every strict reader refuse them. */
    static const char *const ok[] = {"0",    "-0",   "7",      "-12",   "1.5",   "-0.25",
                                     "1e5",  "1E+5", "2.5e-3", "10",    "[0,1]", "{\"a\":-1}",
                                     "1e07", "0.0",  "[1.5 ]", "123456"};
    static const char *const bad[] = {"+1",   "007",  "01",    "1.",       ".5",  "-",
                                      "1e",   "1e+",  "--1",   "1.e5",     "-.5", "[007]",
                                      "0x10", "1ee5", "1.2.3", "Infinity", "NaN", "[1,+2]"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        cr_assert(dlc__json_valid(ok[i], strlen(ok[i])), "%s is JSON", ok[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        cr_assert_not(dlc__json_valid(bad[i], strlen(bad[i])), "%s is not JSON", bad[i]);
}

Test(warm_json, member_spans_of_the_top_object)
{
    const char *t = "{\"options\": {\"options\": 1}, \"sources\": [\"/a\", \"/b\"], \"n\": 7}";
    const char *vs, *ve;
    cr_assert_eq(dlc__json_member(t, t + strlen(t), "sources", &vs, &ve), 0);
    cr_assert_eq(ve - vs, 12);
    cr_assert(strncmp(vs, "[\"/a\", \"/b\"]", 12) == 0);
    cr_assert_eq(dlc__json_member(t, t + strlen(t), "options", &vs, &ve), 0);
    cr_assert(strncmp(vs, "{\"options\": 1}", (size_t)(ve - vs)) == 0);
    cr_assert_eq(dlc__json_member(t, t + strlen(t), "missing", &vs, &ve), -1);
    static const char arr[] = "[1]";
    cr_assert_eq(dlc__json_member(arr, arr + 3, "n", &vs, &ve), -1);
    /* Two members of one name: readers differ on which counts (Python's takes the last), so
     * neither is read. Nested ones of the name do not count. */
    const char *two = "{\"a\": {\"b\": 1, \"b\": 2}, \"b\": [1], \"c\": 0, \"b\": 3}";
    cr_assert_eq(dlc__json_member(two, two + strlen(two), "b", &vs, &ve), -2);
    cr_assert_eq(dlc__json_member(two, two + strlen(two), "a", &vs, &ve), 0);
    cr_assert(strncmp(vs, "{\"b\": 1, \"b\": 2}", (size_t)(ve - vs)) == 0);
    cr_assert_eq(dlc__json_member(two, two + strlen(two), "c", &vs, &ve), 0);
}

Test(warm_json, integers_beyond_64_bits_are_json)
{
    /* Valid JSON that Python reads as an int; its reader, not the grammar, refuses the value. */
    static const char *const ok[] = {"10000000000000000000000000", "-9223372036854775809",
                                     "[18446744073709551616]",
                                     "1000000000000000000000000000000000000000000000000000000000000"
                                     "00000000000000"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        cr_assert(dlc__json_valid(ok[i], strlen(ok[i])), "%s is JSON", ok[i]);
    cr_assert_not(dlc__json_valid("1000000000000000000000000000000000000000000000000000000000000"
                                  "00000000000000x",
                                  76));
}

Test(warm_json, utf8_check_finds_the_first_bad_byte)
{
    static const struct {
        const char *s;
        size_t bad;
    } cases[] = {
        {"plain", 5},
        {"caf\xc3\xa9", 5},
        {"\xe2\x82\xac!", 4},
        {"\xf0\x9f\x98\x80", 4},
        {"a\xff", 1},
        {"ab\xc3", 2},           /* cut at the end */
        {"\xc0\xaf", 0},         /* overlong */
        {"x\xed\xa0\x80", 1},    /* a surrogate */
        {"\xf4\x90\x80\x80", 0}, /* above U+10FFFF */
        {"\xe2\x82", 0},         /* cut */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        cr_assert_eq(dlc__utf8_check(cases[i].s, strlen(cases[i].s)), cases[i].bad, "case %zu", i);
}

static void put_buf(void *user, const char *p, size_t n)
{
    strncat(user, p, n);
}

Test(warm_json, quote_escapes_what_json_needs)
{
    char out[128] = "";
    dlc__json_quote("a\"b\\c\nd\te\x01 \xc3\xa9", put_buf, out);
    cr_assert_str_eq(out, "\"a\\\"b\\\\c\\nd\\te\\u0001 \xc3\xa9\"");
    char back[64];
    size_t len = 0;
    cr_assert_not_null(dlc__json_string(out, out + strlen(out), back, sizeof back, &len));
    cr_assert_str_eq(back, "a\"b\\c\nd\te\x01 \xc3\xa9");
    cr_assert_eq(len, strlen(back));
}

/* A file name is bytes: a folder named "cls\xff" made cacheinfo --json and cachebuild --json
 * write a document no JSON reader takes. Well-formed UTF-8 passes; each other byte is U+FFFD. */
Test(warm_json, quote_keeps_the_document_json_for_names_that_are_not_utf8)
{
    char out[256] = "";
    dlc__json_quote("a\xff b\xc3 c\xe2\x82\xac d\xed\xa0\x80 e\xf0\x9d\x84\x9e f\xc0\xaf "
                    "\xf4\x90\x80\x80\xe2\x82",
                    put_buf, out);
    cr_assert_str_eq(out,
                     "\"a\\ufffd b\\ufffd c\xe2\x82\xac d\\ufffd\\ufffd\\ufffd e\xf0\x9d\x84\x9e "
                     "f\\ufffd\\ufffd \\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\"");
    cr_assert(dlc__json_valid(out, strlen(out)), "%s", out);
}

Test(warm_json, string_escapes_decode_to_utf8)
{
    /* \u00e9, a BMP character, a surrogate pair (U+1D11E), and a lone surrogate (U+FFFD). */
    const char *in = "\"caf\\u00e9 \\u2713 \\ud834\\udd1e \\udc00\"";
    char out[64];
    size_t len = 0;
    cr_assert_not_null(dlc__json_string(in, in + strlen(in), out, sizeof out, &len));
    cr_assert_str_eq(out, "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9d\x84\x9e \xef\xbf\xbd");
    cr_assert_eq(len, strlen(out));
    cr_assert_leq(len, strlen(in) - 2, "decoding never lengthens the quoted text");
}
