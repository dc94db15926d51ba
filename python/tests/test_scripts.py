"""Every benchmark and example script in python/ runs to the end (small
sizes), with the installed package: they call the extension directly in
places (_ext.run_pool, _ext.step_loop), whose argument lists change with
the library, and nothing else would notice."""

import importlib.util
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent.parent  # python/


def run(script, *args):
    path = HERE / script
    if not path.exists():
        pytest.skip(f'{path} is not here (tests run outside the source tree)')
    # sys.path[0] is the script's folder, which holds no linattn: the
    # installed package (or PYTHONPATH's) is the one imported
    r = subprocess.run([sys.executable, str(path), *map(str, args)], capture_output=True,
                       text=True, timeout=600)
    print(r.stdout, r.stderr)
    assert r.returncode == 0, f'{script} exited with {r.returncode}:\n{r.stderr[-2000:]}'
    return r.stdout


def test_bench_pool_decode():
    out = run('benchmarks/bench_pool_decode.py', 1, 2, 1, 8)
    assert '_ext.run_pool, V-first pool' in out and 'C linattn_run, V-first pool' in out


def test_bench_overhead():
    out = run('benchmarks/bench_overhead.py', 1, 1, 4, 4)
    assert 'C loop (linattn_step)' in out


def test_example_gated_deltanet_layer():
    pytest.importorskip('torch')
    out = run('examples/gated_deltanet_layer.py', 16)
    assert 'max |difference| of outputs' in out


def test_example_transformers_qwen3_5():
    torch = pytest.importorskip('torch')
    if int(torch.__version__.split('.')[0]) < 2 or importlib.util.find_spec('transformers') is None:
        pytest.skip('the example needs HF transformers 5.x with torch >= 2')
    out = run('examples/transformers_qwen3_5.py', '--prompt', 64, '--new', 8)
    assert 'max |logit difference|' in out
