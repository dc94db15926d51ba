"""The machine a measurement was taken on, for the titles of the bench's
plots and tables (scripts/plot_sweep.py, scripts/tune.py)."""


def cpu_model():
    """The CPU model /proc/cpuinfo names, else "unknown CPU"."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("model name", "Model name")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"
