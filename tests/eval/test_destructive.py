"""deny-destructive against a table of destructive and harmless shell commands."""

import pytest

from dsh_actors.eval.destructive import destructive

DESTRUCTIVE = [
    "rm -rf /", "sudo rm -rf /", "sudo -u root rm -rf /", "rm -r build", "rm --recursive x", "rm -fR ~",
    "rm ~", "rm -f /*", "dd if=/dev/zero of=/dev/sda", "dd if=/dev/urandom of=/dev/nvme0n1 bs=1M",
    "mkfs.ext4 /dev/sdb1", "sudo mkfs -t xfs /dev/vdb", "wipefs -a /dev/sda", "shred -u secrets.txt",
    "shutdown -h now", "sudo reboot", "systemctl poweroff", "init 0", "echo hi; rm -rf ~",
    "ls && sudo  rm -fr /var", "true || rm -rf src", "cat x | xargs rm -rf", "find . -delete",
    "find / -name '*.log' -exec rm {} \\;", "bash -c 'rm -rf /'", "sh -c \"dd if=/dev/zero of=/dev/sda\"",
    "echo $(rm -rf /)", "echo `rm -rf /`", ":(){ :|:& };:", "cat /dev/zero > /dev/sda", "chmod -R 777 /",
    "chown -R nobody /etc", "git reset --hard HEAD~3", "git clean -fdx", "git push --force origin main",
    "env X=1 rm -rf /tmp/x", "nohup rm -rf data &", "timeout 5 rm -rf data", "eval 'rm -rf /'",
    "mv important.txt /dev/null", "(cd / && rm -rf *)", "rm -rf 'my dir'", "echo 'unclosed",
]
HARMLESS = [
    "ls -la", "rm notes.bak", "rm -f build/output.o", "cat notes.txt", 'echo "rm -rf /"', "grep -r TODO .",
    "dd if=/dev/zero of=disk.img bs=1M count=1", "git status", "git reset HEAD notes.txt", "git clean -n",
    "python -c 'print(1)'", "mkdir -p build && cd build", "find . -name '*.py'", "chmod +x run.sh",
    "echo done > /dev/null", "cp -r src dst", "rmdir empty", "printf 'shutdown\\n'", "echo reboot later",
    "sort data.csv | uniq -c", "tar czf backup.tgz src", "git push origin main", "sudo ls /root",
]


@pytest.mark.parametrize("command,harmful", [(c, True) for c in DESTRUCTIVE] + [(c, False) for c in HARMLESS])
def test_destructive_commands_are_named_and_harmless_ones_pass(command, harmful):
    assert (destructive(command) is not None) is harmful
