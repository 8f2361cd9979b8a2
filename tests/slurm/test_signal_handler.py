"""slurm/train.sbatch's USR1/TERM handler (`forward`) survives a burst of signals: `scancel --full`
signals the batch shell both directly and through sweep.sbatch. Bash 5.2 broke its parser when a
second signal arrived while the handler parsed a command substitution ("unexpected EOF while
looking for matching `)'"), and the wait loop, told by a flag the trap set, could take an
interrupted wait for srun's end: either way the script ended while srun ran on, and the job
FAILED instead of being requeued."""

import re
import signal
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def handler() -> str:
    text = (REPO / "slurm" / "train.sbatch").read_text()
    return re.search(r"^forward\(\) \{.*?^\}$", text, re.S | re.M).group(0)


def harness() -> str:
    """train.sbatch from its handler to the end of its wait loop, with a sleep that ignores USR1 in
    srun's place (srun passes USR1 on to the tasks and runs on)."""
    text = (REPO / "slurm" / "train.sbatch").read_text()
    section = re.search(r'^step=""$.*?^trap - USR1 TERM$', text, re.S | re.M).group(0)
    section = re.sub(r"^srun .*&$", "bash -c \"trap '' USR1; echo ready; sleep 1\" &", section, flags=re.M)
    assert "sleep 1" in section
    return 'log() { echo "[train] $*"; }\n' + section + '\necho "finished $rc"\n'


def test_the_handler_runs_no_command_substitution():
    body = "\n".join(line.split("#")[0] for line in handler().splitlines())
    assert "$(" not in body and "`" not in body, body


def test_a_burst_of_signals_leaves_the_script_running_to_its_end(tmp_path):
    script = tmp_path / "harness.sh"
    script.write_text(harness())
    for _ in range(20):
        shell = subprocess.Popen(["bash", str(script)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert shell.stdout.readline().strip() == "ready"
        for i in range(30):
            shell.send_signal(signal.SIGUSR1 if i % 3 else signal.SIGTERM)
            time.sleep(0.001)
        out, _ = shell.communicate(timeout=30)
        assert shell.returncode == 0 and out.rstrip().endswith("finished 0"), out
