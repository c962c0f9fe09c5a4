// The commands of the CLI (each takes the arguments after its name and
// returns the exit status) and what they share. Results go to stdout; logs
// and progress to stderr; a failure is one "minfer: error: ..." line and a
// non-zero exit (2 for a bad option: the parsers are in cli_args.c and the
// benches' files).
#ifndef MF_TOOLS_CLI_H
#define MF_TOOLS_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "cli_args.h"
#include "minfer/minfer.h"
#include "minfer/model.h"

int mf_cmd_generate(int argc, char **argv); // cmd_generate.c: minfer generate -m DIR -p TEXT ...
int mf_cmd_score(int argc, char **argv);    // cmd_score.c:    minfer score -m DIR (-p TEXT | --tokens 1,2,3) ...
int mf_cmd_info(int argc, char **argv);     // cmd_info.c:     minfer info [-m DIR | --synthetic PRESET ...]
int mf_cmd_bench(int argc, char **argv);    // bench.c:        minfer bench [NAME] [options]
int mf_cmd_serve(int argc, char **argv);    // cmd_serve.c:    minfer serve -m DIR [options] (src/server/)

// After parsing the options of command `cmd`: -1 when the command is to run;
// else it is done, and this is the exit status: 0 after printing its help
// (MF_ARGS_HELP), 2 after the error line "minfer: error: CMD: ERR" (MF_ARGS_BAD).
int mf_cli_parsed(mf_args_result r, const char *cmd, const char *err, void (*help)(FILE *f));
// "minfer: error: WHAT: <mf_last_error()>" on stderr (WHAT formatted as printf); returns 1.
int mf_cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// The monotonic clock, in seconds.
double mf_cli_now(void);
// The backend and the model (a checkpoint or a synthetic preset) that the model
// options name. 0, or 1 after an error line with nothing left open.
int mf_cli_open_model(const mf_model_args *o, bool verbose, mf_backend **be, mf_model **m);

#endif // MF_TOOLS_CLI_H
