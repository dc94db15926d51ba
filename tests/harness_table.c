/* The main of a per-table suite (test_kernels, test_delta). A file of its
 * own in the harness library: test_api links the shared library, which
 * exports no table internals, and so never pulls this in. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "table.h"

int table_suite_main(Suite *(*make_suite)(const la_table *t), const la_table **table,
                     const char *family)
{
    const char *name = getenv("LINATTN_TEST_TABLE");
    int count;
    const la_table *const *all = la_all_tables(&count);
    if (name == NULL) {
        fprintf(stderr, "set LINATTN_TEST_TABLE to one of:");
        for (int i = 0; i < count; i++)
            fprintf(stderr, " %s", all[i]->name);
        fprintf(stderr, "\n");
        return 2;
    }
    for (int i = 0; i < count; i++)
        if (strcmp(all[i]->name, name) == 0)
            *table = all[i];
    if (*table == NULL) {
        fprintf(stderr, "table %s is not in this build\n", name);
        return 1;
    }
    if (!la_table_runnable(*table)) {
        printf("SKIP table %s: this CPU cannot run it\n", name);
        return 77;
    }
    test_seed();
    printf("table under test: %s%s\n", (*table)->name, family);
    SRunner *sr = srunner_create(make_suite(*table));
    srunner_run_all(sr, CK_NORMAL);
    const int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
