import pytest
import torch

from trainables.models import MODELS, build_model


@pytest.mark.parametrize("name", sorted(MODELS))
def test_every_model_maps_a_batch_of_images_to_one_logit_per_class(name: str):
    model = build_model(name, num_classes=2, image_size=32)
    logits = model(torch.randn(3, 3, 32, 32))
    assert logits.shape == (3, 2)
    assert len(model.stages) >= 2


def test_the_small_cnn_is_the_seed_studys_model():
    model = build_model("small_cnn", num_classes=2, image_size=64)
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    dense = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert [(c.out_channels, c.kernel_size) for c in convs] == [(32, (3, 3))]
    assert [(d.in_features, d.out_features) for d in dense] == [(32 * 32 * 32, 128), (128, 2)]


def test_an_unknown_model_name_is_refused_with_the_known_names():
    with pytest.raises(ValueError, match="resnet18"):
        build_model("vgg", num_classes=2, image_size=32)


@pytest.mark.parametrize(("name", "segments"), [("small_cnn", None), ("resnet18", 3)])
def test_checkpointed_training_gives_the_same_outputs_and_gradients(name, segments):
    torch.manual_seed(0)
    plain = build_model(name, num_classes=2, image_size=32)
    checkpointed = build_model(name, num_classes=2, image_size=32)
    checkpointed.load_state_dict(plain.state_dict())
    checkpointed.enable_checkpointing(segments)
    x = torch.randn(4, 3, 32, 32)
    outputs = [model(x) for model in (plain, checkpointed)]
    assert torch.allclose(outputs[0], outputs[1], atol=1e-6)
    for out in outputs:
        out.square().sum().backward()
    for a, b in zip(plain.parameters(), checkpointed.parameters(), strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-5)


def test_segments_split_the_stages_evenly_and_only_while_training():
    model = build_model("resnet18", num_classes=2, image_size=32)
    model.enable_checkpointing(3)
    assert [len(segment) for segment in model.segments()] == [2, 2, 2]
    assert model.checkpointing
    model.eval()
    assert not model.checkpointing
    model.train()
    with torch.no_grad():
        assert not model.checkpointing
