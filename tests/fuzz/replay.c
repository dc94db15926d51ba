/* Runs fuzz_call's checks over files or directories of inputs without
 * libFuzzer (any compiler): the checked-in corpus as a regression test, or
 * a crash file from a fuzzing run:  fuzz_replay tests/fuzz/corpus crash-... */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    uint8_t buf[1 << 16];
    const size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    return 0;
}

int main(int argc, char **argv)
{
    LLVMFuzzerInitialize(&argc, &argv);
    int errors = 0, files = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            errors++;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            errors += run_file(argv[i]);
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        for (struct dirent *e; d && (e = readdir(d));) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            errors += run_file(path);
            files++;
        }
        if (d)
            closedir(d);
    }
    printf("fuzz_replay: %d inputs, all checks passed\n", files - errors);
    return errors != 0 || files == 0;
}
