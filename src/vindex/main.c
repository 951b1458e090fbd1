/*
 * main.c — the vindex command line: the format-native tool for VINDEX3 containers.
 * Commands live in one table (name, usage, help, positional arity, accepted flags,
 * handler) that drives dispatch, help and usage errors; each command group is its own
 * file. Exit codes: 0 ok, 1 failure, 2 usage.
 */
#include "cli.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

/* X(name, usage, help, min positional, max positional, flags): a flag ending in '='
 * takes a value. Add a command with one line here and one cmd_<group>.c file. */
#define COMMANDS(X)                                                                         \
    X(encode, "HF_DIR -o OUT [--dtype f32|f16|bf16] [--no-down-meta]",                      \
      "encode a Hugging Face checkpoint directory into a new container", 1, 1,               \
      "-o=,--dtype=,--no-down-meta")                                                          \
    X(inspect, "PATH", "summarise a container: version, geometry, objects, sizes", 1, 1, "") \
    X(describe, "PATH OBJECT",                                                              \
      "one object's tensors, or a component's execution surface", 2, 2, "")                 \
    X(representations, "PATH", "list representations: dtype, fidelity, segments, bytes", 1, 1, "") \
    X(precision, "PATH", "bits per weight from stored bytes, per representation and overall", 1, 1, "") \
    X(verify, "PATH [--source DIR]",                                                        \
      "re-hash segments, payloads and (when present) the source checkpoint", 1, 1, "--source=") \
    X(represent, "PATH OBJECT --dtype q8_0|q4_0|q4_k|q6_k|mxfp4|f16|bf16|f32 [--profile NAME]", \
      "compile a new representation of an object beside the original", 2, 2, "--dtype=,--profile=") \
    X(profile, "PATH [add NAME OBJECT=REPRESENTATION ...]",                                  \
      "list profiles with their derived authority, or add one", 1, 8, "")                   \
    X(diff, "PATH OBJECT REPR_A REPR_B",                                                    \
      "compare one object under two representations value by value", 4, 4, "")             \
    X(bank, "PATH | import CONTAINER -o OUT [--fused]",                                       \
      "show a container's shape and banks, or import a graph MoE container as a bank container", 1, 2, \
      "-o=,--fused")                                                                          \
    X(tokenize, "PATH [--no-special] [--] TEXT",                                            \
      "token ids and pieces of TEXT (PATH: a container or a dir with tokenizer.json; '--' "  \
      "before a TEXT that starts with '-')", 2, 2, "--no-special")

typedef struct command {
    const char *name, *usage, *help;
    int min, max;
    const char *flags;
    int (*run)(const vindex_args *a);
} command;

#define DECLARE(n, u, h, lo, hi, f) int vindex_cmd_##n(const vindex_args *a);
COMMANDS(DECLARE)
#define ENTRY(n, u, h, lo, hi, f) {#n, u, h, lo, hi, f, vindex_cmd_##n},
static const command commands[] = {COMMANDS(ENTRY)};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out)
{
    fprintf(out, "usage: vindex COMMAND [ARGS] [--json]\n\ncommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  %-16s %s\n", commands[i].name, commands[i].help);
    fprintf(out, "\n'vindex COMMAND --help' shows a command's arguments. Exit: 0 ok, 1 failure, 2 usage.\n");
}

static void command_help(const command *c, FILE *out)
{
    fprintf(out, "usage: vindex %s %s [--json]\n  %s\n", c->name, c->usage, c->help);
}

/* Is `arg` one of the command's flags? Sets *takes_value. */
static int known_flag(const command *c, const char *arg, int *takes_value)
{
    size_t n = strlen(arg);
    const char *p = c->flags;
    while (*p) {
        size_t len = strcspn(p, ",");
        int val = len > 0 && p[len - 1] == '=';
        if ((size_t)(len - (size_t)val) == n && strncmp(p, arg, n) == 0) {
            *takes_value = val;
            return 1;
        }
        p += len;
        if (*p == ',')
            p++;
    }
    return 0;
}

static int usage_error(const command *c, const char *fmt, const char *what)
{
    fprintf(stderr, "vindex %s: ", c->name);
    fprintf(stderr, fmt, what);
    fputc('\n', stderr);
    command_help(c, stderr);
    return VINDEX_USAGE;
}

static int dispatch(const command *c, int argc, char **argv)
{
    vindex_args a = {.cmd = c->name};
    int only_pos = 0;
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        int takes = 0;
        if (!only_pos && strcmp(arg, "--") == 0) {
            only_pos = 1;
        } else if (!only_pos && (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)) {
            command_help(c, stdout);
            return VINDEX_OK;
        } else if (!only_pos && strcmp(arg, "--json") == 0) {
            a.json = 1;
        } else if (!only_pos && arg[0] == '-' && arg[1] != '\0') {
            if (!known_flag(c, arg, &takes))
                return usage_error(c, "unknown option '%s'", arg);
            if (takes && i + 1 >= argc)
                return usage_error(c, "option '%s' needs a value", arg);
            if (vindex_flag(&a, arg))
                return usage_error(c, "option '%s' given twice", arg);
            if (a.nflag == VINDEX_MAX_FLAGS)
                return usage_error(c, "too many options (at '%s')", arg);
            a.flag[a.nflag] = arg;
            a.val[a.nflag++] = takes ? argv[++i] : "";
        } else {
            if (a.npos == c->max || a.npos == VINDEX_MAX_POS)
                return usage_error(c, "unexpected argument '%s'", arg);
            a.pos[a.npos++] = arg;
        }
    }
    if (a.npos < c->min)
        return usage_error(c, "%s", a.npos ? "too few arguments" : "missing arguments");
    return c->run(&a);
}

int main(int argc, char **argv)
{
    /* a closed output pipe or a file-size limit is a write error with a message (EPIPE,
     * EFBIG, and the written tree removed), not a silent death by signal */
    signal(SIGPIPE, SIG_IGN);
    signal(SIGXFSZ, SIG_IGN);
    if (argc < 2) {
        usage(stderr);
        return VINDEX_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        if (argc > 2) {
            for (size_t i = 0; i < NCOMMANDS; i++) {
                if (strcmp(commands[i].name, argv[2]) == 0) {
                    command_help(&commands[i], stdout);
                    return VINDEX_OK;
                }
            }
        }
        usage(stdout);
        return VINDEX_OK;
    }
    if (strcmp(name, "--version") == 0) {
        printf("vindex 0.1.0 (reads VINDEX3, index.json versions 3-4)\n");
        return VINDEX_OK;
    }
    for (size_t i = 0; i < NCOMMANDS; i++) {
        if (strcmp(commands[i].name, name) == 0)
            return dispatch(&commands[i], argc - 2, argv + 2);
    }
    fprintf(stderr, "vindex: unknown command '%s'\n", name);
    usage(stderr);
    return VINDEX_USAGE;
}
