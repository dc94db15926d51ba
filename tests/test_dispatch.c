/* Dispatch as a user sees it, driven by the environment meson sets:
 *   LINATTN_ISA          what the user forces (may be unset)
 *   LINATTN_TEST_EXPECT  "isa-error": every compute call must fail with
 *                        LINATTN_E_ISA until linattn_set_isa succeeds;
 *                        otherwise the ISA name get_isa must report
 *                        ("best" = the best available, checked against
 *                        linattn_isa_available); "forced": the ISA named
 *                        by LINATTN_ISA if linattn_isa_available says this
 *                        CPU and build have it, else "isa-error".
 *   LINATTN_TEST_CPU_OFF CPU features the library must treat as absent
 *                        (read by src/cpu.c): the tables needing them must
 *                        be unavailable, and auto falls back to the best
 *                        of the rest. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "linattn.h"

/* The ISAs the library knows, whatever their number: named, not "unknown". */
static int is_isa(int isa) { return strcmp(linattn_isa_name((linattn_isa)isa), "unknown") != 0; }

static const char *expect(void)
{
    const char *e = getenv("LINATTN_TEST_EXPECT");
    if (e && strcmp(e, "forced") == 0) {
        const char *forced = getenv("LINATTN_ISA");
        for (int isa = LINATTN_ISA_SCALAR; is_isa(isa); isa++)
            if (strcmp(forced, linattn_isa_name((linattn_isa)isa)) == 0)
                return linattn_isa_available((linattn_isa)isa) ? forced : "isa-error";
        return "isa-error";
    }
    return e ? e : "best";
}

static linattn_isa best_available(void)
{
    linattn_isa best = LINATTN_ISA_SCALAR;
    for (int isa = LINATTN_ISA_SCALAR; is_isa(isa); isa++)
        if (linattn_isa_available((linattn_isa)isa))
            best = (linattn_isa)isa; /* the enum lists ISAs in order of preference */
    return best;
}

static linattn_status tiny_forward(void)
{
    float q[4] = {0.1f, 0.2f, 0.3f, 0.4f}, k[4] = {0.5f, -0.5f, 1, 0}, v[4] = {1, 2, 3, 4}, o[4];
    linattn_config cfg;
    linattn_config_init(&cfg, 1, 1, 2, 2, 2);
    return linattn_forward(&cfg, q, k, v, NULL, o, NULL, NULL);
}

START_TEST(env_choice)
{
    const char *want = expect();
    printf("LINATTN_ISA=%s: active %s, expected %s\n",
           getenv("LINATTN_ISA") ? getenv("LINATTN_ISA") : "(unset)",
           linattn_isa_name(linattn_get_isa()), want);
    if (strcmp(want, "isa-error") == 0) {
        ck_assert_int_eq(tiny_forward(), LINATTN_E_ISA);
        ck_assert_int_eq(tiny_forward(), LINATTN_E_ISA); /* stays an error */
        /* before any argument is looked at, in every compute entry point */
        float x = 0;
        ck_assert_int_eq(linattn_forward(NULL, &x, &x, &x, NULL, &x, NULL, NULL), LINATTN_E_ISA);
        ck_assert_ptr_nonnull(strstr(linattn_last_error(), "LINATTN_ISA="));
        linattn_config cfg;
        linattn_config_init_step(&cfg, 1, 1, 2, 2);
        cfg.dtype.q = LINATTN_BF16; /* refused by the float32 calls, after the table */
        ck_assert_int_eq(linattn_delta_step(&cfg, &x, &x, &x, NULL, &x, &x, &x), LINATTN_E_ISA);
        ck_assert_int_eq(linattn_run(LINATTN_OP_DELTA_STEP, NULL, NULL), LINATTN_E_ISA);
        ck_assert_ptr_nonnull(strstr(linattn_last_error(), "LINATTN_ISA="));
        linattn_plan *plan = NULL;
        ck_assert_int_eq(linattn_plan_create(&plan, LINATTN_OP_STEP, NULL, NULL), LINATTN_E_ISA);
        ck_assert_ptr_null(plan);
        ck_assert_ptr_nonnull(strstr(linattn_last_error(), "LINATTN_ISA="));
        ck_assert_int_eq(linattn_set_isa(LINATTN_ISA_AUTO), LINATTN_OK);
        ck_assert_int_eq(tiny_forward(), LINATTN_OK);
        return;
    }
    const linattn_isa expected = strcmp(want, "best") == 0 ? best_available() : LINATTN_ISA_AUTO;
    if (expected != LINATTN_ISA_AUTO)
        ck_assert_str_eq(linattn_isa_name(linattn_get_isa()), linattn_isa_name(expected));
    else
        ck_assert_str_eq(linattn_isa_name(linattn_get_isa()), want);
    ck_assert_int_eq(tiny_forward(), LINATTN_OK);
}
END_TEST

START_TEST(set_isa_rules)
{
    ck_assert_int_eq(linattn_isa_available(LINATTN_ISA_AUTO), 1);
    ck_assert_int_eq(linattn_isa_available(LINATTN_ISA_SCALAR), 1);
    ck_assert_int_eq(linattn_isa_available((linattn_isa)42), 0);
    ck_assert_int_eq(linattn_set_isa((linattn_isa)42), LINATTN_E_ISA);
    for (int isa = LINATTN_ISA_SCALAR; is_isa(isa); isa++) {
        const linattn_isa before = linattn_get_isa();
        const linattn_status st = linattn_set_isa((linattn_isa)isa);
        if (linattn_isa_available((linattn_isa)isa)) {
            ck_assert_int_eq(st, LINATTN_OK);
            ck_assert_int_eq(linattn_get_isa(), isa);
            ck_assert_int_eq(tiny_forward(), LINATTN_OK);
        } else {
            ck_assert_int_eq(st, LINATTN_E_ISA); /* and nothing changes */
            ck_assert_int_eq(linattn_get_isa(), before);
        }
    }
#if defined(__x86_64__)
    ck_assert_int_eq(linattn_isa_available(LINATTN_ISA_NEON), 0);
#elif defined(__aarch64__)
    ck_assert_int_eq(linattn_isa_available(LINATTN_ISA_AVX2), 0);
    ck_assert_int_eq(linattn_isa_available(LINATTN_ISA_AVX512), 0);
#endif
    ck_assert_int_eq(linattn_set_isa(LINATTN_ISA_AUTO), LINATTN_OK);
    ck_assert_int_eq(linattn_get_isa(), best_available());
}
END_TEST

/* Whether the comma-separated list has the name. */
static int listed(const char *list, const char *name)
{
    for (const char *p = list; *p != '\0';) {
        const size_t len = strcspn(p, ",");
        if (len == strlen(name) && strncmp(p, name, len) == 0)
            return 1;
        p += len + (p[len] == ',');
    }
    return 0;
}

/* The ISAs a masked feature rules out are unavailable; the rest still run
 * (set_isa_rules and env_choice check what auto chooses among them).
 * avx512bf16 rules out one of the two AVX-512 tables: the ISA stays. */
START_TEST(masked_features)
{
    const char *off = getenv("LINATTN_TEST_CPU_OFF");
    if (off == NULL)
        return;
    printf("LINATTN_TEST_CPU_OFF=%s: active %s\n", off, linattn_isa_name(linattn_get_isa()));
    if (listed(off, "avx512"))
        ck_assert_int_eq(linattn_isa_available(LINATTN_ISA_AVX512), 0);
    if (listed(off, "avx2") || listed(off, "fma"))
        ck_assert_int_eq(linattn_isa_available(LINATTN_ISA_AVX2), 0);
    if (listed(off, "asimd"))
        ck_assert_int_eq(linattn_isa_available(LINATTN_ISA_NEON), 0);
    ck_assert_int_eq(linattn_isa_available(LINATTN_ISA_SCALAR), 1);
    ck_assert_int_eq(tiny_forward(), LINATTN_OK);
}
END_TEST

START_TEST(names_and_strings)
{
    ck_assert_str_eq(linattn_isa_name(LINATTN_ISA_AUTO), "auto");
    ck_assert_str_eq(linattn_isa_name(LINATTN_ISA_AVX512), "avx512");
    ck_assert_str_eq(linattn_isa_name((linattn_isa)99), "unknown");
    for (int s = -2; s < 12; s++)
        ck_assert_ptr_nonnull(linattn_strerror((linattn_status)s));
    ck_assert_str_eq(linattn_version(), "0.4.0");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("dispatch");
    TCase *tc = tcase_create("dispatch");
    tcase_add_test(tc, env_choice);
    /* the rest changes the active table: after env_choice, in their own processes */
    tcase_add_test(tc, set_isa_rules);
    tcase_add_test(tc, names_and_strings);
    tcase_add_test(tc, masked_features);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
