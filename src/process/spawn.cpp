// spawn_child (spawn.h): fork, the child's set-up (death signal, signal mask, descriptors), exec.
#include "process/spawn.h"

#include <csignal>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace tinkerd::process {

pid_t spawn_child(const std::string & program, const std::vector<std::string> & argv, void (*before_exec)()) {
    std::vector<std::string> copy = argv;
    std::vector<char *> cargs;
    for (auto & a : copy) {
        cargs.push_back(a.data());
    }
    cargs.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) {  // the parent died before prctl
            _exit(1);
        }
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        if (before_exec != nullptr) {
            before_exec();
        }
        close_range(3, ~0U, 0);
        execv(program.c_str(), cargs.data());
        _exit(127);
    }
    return pid;
}

std::string exit_reason(int status) {
    return WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                               : "exit code " + std::to_string(WEXITSTATUS(status));
}

}  // namespace tinkerd::process
