import pytest
import torch
from torch import nn

from trainables.models import (
    ModelError,
    build_model,
    check_model,
    meta_model,
    model_names,
    torchvision_names,
    weights_file,
)

USER = "tests.trainables.user_models"


@pytest.mark.parametrize("name", ["small_cnn", "resnet18", "mobilenet_v3_small", f"{USER}:tiny"])
def test_a_model_by_name_or_factory_maps_images_to_one_logit_per_class(name: str):
    model = build_model(name, num_classes=3, image_size=32)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 3)


def test_the_small_cnn_is_the_seed_studys_model():
    model = build_model("small_cnn", num_classes=2, image_size=64)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    dense = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert [(c.out_channels, c.kernel_size) for c in convs] == [(32, (3, 3))]
    assert [(d.in_features, d.out_features) for d in dense] == [(32 * 32 * 32, 128), (128, 2)]


def test_every_torchvision_classifier_is_known_by_name():
    import torchvision

    listed = torchvision.models.list_models(module=torchvision.models)
    assert set(listed) <= set(model_names())
    assert {"resnet18", "convnext_tiny", "vit_b_16", "efficientnet_b0"} <= set(listed)
    assert not {"fasterrcnn_resnet50_fpn", "raft_large"} & set(torchvision_names())


@pytest.mark.parametrize("name", sorted(torchvision_names()))
def test_every_torchvision_classifier_builds_for_two_classes_at_224_px_without_downloading(
    name: str, tmp_path, monkeypatch
):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))  # where torch's hub would download to
    check_model(name, num_classes=2, image_size=224)  # shapes only, on the meta device
    assert list(tmp_path.iterdir()) == []


def test_models_with_a_fixed_input_size_are_built_for_the_configured_size():
    check_model("vit_b_16", num_classes=2, image_size=64)
    check_model("maxvit_t", num_classes=2, image_size=224)
    meta = torch.device("meta")
    assert build_model("vit_b_16", num_classes=2, image_size=64, device=meta).image_size == 64
    with pytest.raises(ModelError):  # the size it was built for is what it takes
        check_model("vit_b_16", num_classes=2, image_size=72)


def test_an_image_size_the_model_cannot_take_is_refused_with_one_that_works():
    with pytest.raises(ModelError, match=r"cannot take 32 px images .* it works at 75 px"):
        check_model("inception_v3", num_classes=2, image_size=32)
    with pytest.raises(ModelError, match="it works at 32 px"):
        check_model(f"{USER}:needs_32_px", num_classes=2, image_size=16)


def test_a_model_that_needs_a_multiple_of_its_patch_gets_the_nearest_size_not_a_minimum():
    with pytest.raises(ModelError, match="it works at 112 px"):  # 7 patches of 16
        check_model("vit_b_16", num_classes=2, image_size=100)


def test_an_unknown_name_is_refused_naming_the_three_ways_to_give_a_model():
    with pytest.raises(ModelError, match=r"small_cnn.*torchvision.*module:function"):
        build_model("vgg", num_classes=2, image_size=32)


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        ("no_such_package.models:build", "cannot import module 'no_such_package.models'"),
        (f"{USER}:missing", f"module '{USER}' has no 'missing'"),
        (f"{USER}:NOT_CALLABLE", "is a int, not a function"),
        (f"{USER}:not_a_module", "returned a dict, not a torch nn.Module"),
    ],
)
def test_a_factory_that_cannot_give_a_model_says_why(factory: str, message: str):
    with pytest.raises(ModelError, match=message):
        check_model(factory, num_classes=2, image_size=16)


def test_a_factory_whose_logits_have_the_wrong_shape_is_refused():
    with pytest.raises(ModelError, match=r"not \(2, 2\) logits"):
        check_model(f"{USER}:wrong_outputs", num_classes=2, image_size=16)


def test_pretrained_weights_load_from_torchs_cache_as_on_a_users_machine(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    path = weights_file("mobilenet_v3_small")
    assert path.parent == tmp_path / "hub" / "checkpoints"
    torch.manual_seed(1)
    imagenet = build_model("mobilenet_v3_small", num_classes=1000, image_size=64)
    path.parent.mkdir(parents=True)
    torch.save(imagenet.state_dict(), path)
    monkeypatch.setattr(torch.hub, "download_url_to_file", _no_network)

    model = build_model("mobilenet_v3_small", num_classes=2, image_size=64, pretrained=True)

    body = {k: v for k, v in model.state_dict().items() if not k.startswith("classifier.3")}
    saved = imagenet.state_dict()
    assert body and all(torch.equal(value, saved[key]) for key, value in body.items())
    assert model.classifier[3].out_features == 2  # a new head for the data's classes
    assert model(torch.randn(2, 3, 64, 64)).shape == (2, 2)


def test_pretrained_weights_that_cannot_be_fetched_say_where_the_file_goes(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "download_url_to_file", _no_network)
    with pytest.raises(ModelError, match=r"not in torch's cache \(.*hub/checkpoints/resnet18"):
        build_model("resnet18", num_classes=2, image_size=32, pretrained=True)


def test_pretrained_googlenet_loads_its_auxiliary_heads_then_trains_with_one_output(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    monkeypatch.setattr(torch.hub, "download_url_to_file", _no_network)
    import torchvision

    imagenet = torchvision.models.googlenet(weights=None, aux_logits=True, init_weights=True)
    weights_file("googlenet").parent.mkdir(parents=True)
    torch.save(imagenet.state_dict(), weights_file("googlenet"))
    model = build_model("googlenet", num_classes=2, image_size=64, pretrained=True).train()
    logits = model(torch.randn(2, 3, 64, 64))
    assert isinstance(logits, torch.Tensor) and logits.shape == (2, 2)


def test_pretrained_weights_with_a_fixed_size_refuse_another_size_before_loading():
    with pytest.raises(ModelError, match="'vit_b_16' are for 224 px images, not 64"):
        build_model("vit_b_16", num_classes=2, image_size=64, pretrained=True)


def test_only_torchvision_models_have_pretrained_weights():
    with pytest.raises(ModelError, match="a factory loads its own weights"):
        build_model(f"{USER}:tiny", num_classes=2, image_size=32, pretrained=True)


def test_squeezenets_convolutional_head_is_replaced_too(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    imagenet = build_model("squeezenet1_1", num_classes=1000, image_size=64)
    weights_file("squeezenet1_1").parent.mkdir(parents=True)
    torch.save(imagenet.state_dict(), weights_file("squeezenet1_1"))
    model = build_model("squeezenet1_1", num_classes=5, image_size=64, pretrained=True)
    head = model.classifier[1]
    assert isinstance(head, nn.Conv2d) and head.out_channels == 5


def _no_network(url, *args, **kwargs):
    raise OSError(f"no network here: {url}")


def test_a_registered_factory_is_known_by_name_and_a_name_is_registered_once(monkeypatch):
    from trainables import models

    monkeypatch.setattr(models, "_OWN", dict(models._OWN))

    @models.register_model("tiny_net")
    def tiny_net(*, num_classes: int, image_size: int) -> nn.Module:
        return nn.Sequential(nn.Flatten(), nn.Linear(3 * image_size**2, num_classes))

    assert "tiny_net" in model_names()
    assert build_model("tiny_net", num_classes=4, image_size=8)(torch.randn(2, 3, 8, 8)).shape == (
        2,
        4,
    )
    with pytest.raises(ValueError, match="already registered"):
        models.register_model("small_cnn")(tiny_net)


def test_a_builder_that_reads_values_gives_a_meta_model_of_the_cpu_models_shapes():
    """RegNet computes its widths with tensors while building, so it is built on the CPU
    with torch.nn.init's filling skipped, then moved: same shapes, and init works after."""
    meta = meta_model("regnet_y_400mf", num_classes=2, image_size=64)
    cpu = build_model("regnet_y_400mf", num_classes=2, image_size=64)
    assert {p.device.type for p in meta.parameters()} == {"meta"}
    shapes = {name: p.shape for name, p in cpu.state_dict().items()}
    assert {name: p.shape for name, p in meta.state_dict().items()} == shapes
    weight = torch.zeros(4, 4)
    nn.init.ones_(weight)  # the skipping ended with the build
    assert weight.sum() == 16


def test_a_meta_model_built_on_the_cpu_skips_filling_in_weights_a_cpu_model_fills():
    from tests.trainables import user_models

    user_models.INITIALISED_SUMS.clear()
    meta_model(f"{USER}:reads_values_while_built", num_classes=2, image_size=8)
    build_model(f"{USER}:reads_values_while_built", num_classes=2, image_size=8)
    assert user_models.INITIALISED_SUMS == [0.0, 8.0]


def test_a_model_whose_forward_cannot_run_on_the_meta_device_is_checked_on_the_cpu():
    check_model(f"{USER}:reads_values", num_classes=2, image_size=16)
    meta = build_model(f"{USER}:reads_values", num_classes=2, image_size=16,
                       device=torch.device("meta"))  # fmt: skip
    with pytest.raises(Exception):  # noqa: B017 - what the meta device cannot do, checked
        meta(torch.empty(1, 3, 16, 16, device="meta"))


@pytest.mark.parametrize("name", ["small_cnn", "resnet18"])
def test_this_projects_and_torchvisions_models_are_made_on_the_device_asked_for(name):
    model = build_model(name, num_classes=2, image_size=32, device=torch.device("meta"))
    assert all(p.is_meta for p in model.parameters())  # nothing was made on the host first


def test_a_users_factory_builds_where_it_builds_and_is_moved_to_the_device_after():
    factory = "tests.trainables.user_models:from_host_generator"
    model = build_model(factory, num_classes=2, image_size=32, device=torch.device("meta"))
    assert all(p.is_meta for p in model.parameters())
