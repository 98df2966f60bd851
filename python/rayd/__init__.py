"""Python client of rayd's command trainables.

A rayd trial may be any command, one process per rank. Inside such a process,
:mod:`rayd.train` reads the trial's config, rank and checkpoint from the
environment that rayd sets, and reports results to the rank's actor::

    import rayd.train as rt

    config = rt.get_config()
    for epoch in range(config.get("epochs", 5)):
        ...
        rt.report({"loss": loss}, checkpoint=checkpoint_dir)

Run by hand (no rayd), the same script trains alone and prints its reports.
See docs/command-trainables.md. Standard library only; Python 3.8 or later.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
