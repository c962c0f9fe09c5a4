// `minfer generate` (tools/cmd_generate.c): takes the arguments after the
// command and returns the exit code.
#ifndef MF_TOOLS_CMD_GENERATE_H
#define MF_TOOLS_CMD_GENERATE_H

int mf_cmd_generate(int argc, char **argv); // minfer generate -m DIR -p TEXT [options]

#endif // MF_TOOLS_CMD_GENERATE_H
