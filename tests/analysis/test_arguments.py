import argparse

import pytest

from analysis.arguments import ACCURACY, COUNT, POSITIVE


def test_each_number_takes_its_range_and_says_what_it_wanted_otherwise():
    assert (ACCURACY("0"), ACCURACY("1"), COUNT("3"), POSITIVE("0.5")) == (0.0, 1.0, 3, 0.5)
    for read, text, said in (
        (ACCURACY, "1.5", "1.5 is not an accuracy from 0 to 1"),
        (ACCURACY, "high", "'high' is not an accuracy from 0 to 1"),
        (COUNT, "0", "0 is not a whole number of 1 or more"),
        (COUNT, "1.5", "'1.5' is not a whole number of 1 or more"),
        (POSITIVE, "0", "0 is not a number above 0"),
    ):
        with pytest.raises(argparse.ArgumentTypeError, match=f"^{said}$".replace(".", r"\.")):
            read(text)
