// `minfer score`, `minfer info -m`, `minfer bench model` (tools/cmd_model.c).
// Each takes the arguments after the command and returns the exit code.
#ifndef MF_TOOLS_CMD_MODEL_H
#define MF_TOOLS_CMD_MODEL_H

int mf_cmd_score(int argc, char **argv);      // minfer score -m DIR (-p TEXT | --tokens 1,2,3) ...
int mf_cmd_model_info(int argc, char **argv); // minfer info -m DIR | --synthetic PRESET ...
int mf_bench_model_main(int argc, char **argv); // minfer bench model ...

#endif // MF_TOOLS_CMD_MODEL_H
