"""`bench/device_bundle.py`: what travels to the GPU machine, and what is taken out again."""

import importlib.util

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("device_bundle", REPO / "bench" / "device_bundle.py")
bundle = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bundle)


def test_only_the_dependencies_the_machine_lacks_are_installed():
    names = {
        bundle._name(r.split("[")[0].split(">")[0].split("=")[0]) for r in bundle.requirements()
    }
    assert {"ray", "optuna", "mlflow", "pydantic", "moocore", "plotly"} <= names
    assert not names & {"torch", "torchvision", "numpy", "pandas", "scipy", "pyarrow"}


def test_a_distribution_the_machine_has_is_taken_out_and_nothing_outside_the_folder(tmp_path):
    site = tmp_path / "site"
    (site / "numpy" / "core").mkdir(parents=True)
    (site / "numpy" / "__init__.py").write_text("")
    (site / "numpy" / "core" / "multiarray.py").write_text("")
    (site / "numpy.libs").mkdir()
    (site / "numpy.libs" / "libgfortran.so").write_text("")
    (site / "optuna").mkdir()
    info = site / "numpy-2.3.0.dist-info"
    info.mkdir()
    (info / "RECORD").write_text(
        "numpy/__init__.py,,\nnumpy/core/multiarray.py,,\nnumpy.libs/libgfortran.so,,\n"
        "../../bin/f2py,,\n..,,\n,,\n"
    )
    keep = tmp_path / "beside.txt"
    keep.write_text("not the bundle's")
    (site / "optuna-5.0.0.dist-info").mkdir()

    assert bundle.take_out_what_the_device_has(site) == ["numpy"]
    assert sorted(p.name for p in site.iterdir()) == ["optuna", "optuna-5.0.0.dist-info"]
    assert keep.exists() and tmp_path.exists()


def test_a_folder_two_distributions_share_keeps_the_files_of_the_one_that_stays(tmp_path):
    site = tmp_path / "site"
    (site / "google" / "protobuf").mkdir(parents=True)
    (site / "google" / "auth").mkdir(parents=True)
    (site / "google" / "protobuf" / "message.py").write_text("")
    (site / "google" / "auth" / "credentials.py").write_text("")
    info = site / "protobuf-6.0.0.dist-info"
    info.mkdir()
    (info / "RECORD").write_text("google/protobuf/message.py,,\n")

    assert bundle.take_out_what_the_device_has(site) == ["protobuf"]
    assert (site / "google" / "auth" / "credentials.py").exists()
    assert not (site / "google" / "protobuf").exists()
