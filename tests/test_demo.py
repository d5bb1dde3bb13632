import subprocess
import sys


def test_the_demo_prints_each_calls_result_and_cards(cluster_env):
    out = subprocess.run([sys.executable, "-m", "dsh_actors", "demo"], capture_output=True, text=True, timeout=240,
                         env=cluster_env)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "result  (ok) 42" in text
    assert '"card": "terminal", "title": "ls -la"' in text
    assert "Error: destructive commands are not allowed in the demo" in text
    assert "Error: agent-2 may not write notes" in text
    assert "UNKNOWN_TOOL" in text
    assert "Error: agent-3 has used its budget of 2 calls" in text
    assert "audit (policy actor): agent-1/1: ok" in text
