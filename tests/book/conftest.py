"""Every test here draws figures through pyplot; close them after each test, so that the
suite never holds more than matplotlib's 20 open figures (its warning is an error here)."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")
