"""Which images a trial trains on: the `data` section of a config."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    ValidatorFunctionWrapHandler,
    field_validator,
)

Source = Literal["synthetic", "image_folder", "oxford_pets", "auto"]


class DataSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # synthetic: offline procedurally drawn cats vs dogs; image_folder: your class-per-folder
    # tree (the PetImages layout); oxford_pets: Oxford-IIIT Pet as cat vs dog; auto: the
    # image folder at `root` when it holds class folders with images, else synthetic.
    source: Source = "synthetic"
    # image_folder / auto: the folder of class folders; oxford_pets: where torchvision's
    # OxfordIIITPet lives or downloads to (None: <cache_dir>/oxford_pets).
    root: str | None = Field(None, validate_default=True)
    cache_dir: str | None = None  # decoded images; None: $XDG_CACHE_HOME/batchsearch
    image_size: int = Field(64, ge=16, le=1024, strict=True)  # px, square; the seed used 200
    # images per class, as in the seed study; "all": every image left after val and test
    train_per_class: Annotated[int, Field(gt=0)] | Literal["all"] = 600
    val_per_class: int = Field(200, gt=0, strict=True)  # images per class to validate on
    test_per_class: int = Field(200, gt=0, strict=True)  # images per class, scored at the end
    seed: int = Field(0, ge=0, strict=True)  # which images are drawn / how the split falls

    # A field validator on `root` (not a model validator) so that the message is reported
    # at `data.root`, where the user has to add it. `source` is declared first, so it is
    # in `info.data` here.
    @field_validator("root")
    @classmethod
    def _root_for_image_folder(cls, root: str | None, info: ValidationInfo) -> str | None:
        if info.data.get("source") == "image_folder" and not root:
            raise ValueError(
                "is required when source is 'image_folder': the folder that holds one "
                f"sub-folder of images per class (e.g. PetImages with Cat/ and Dog/), got {root!r}"
            )
        return root

    # Wrapped so that a bad value is one problem ("whole number or 'all'"), not one per
    # member of the union with pydantic's internal names in its key path.
    @field_validator("train_per_class", mode="wrap")
    @classmethod
    def _train_count(
        cls, value: object, handler: ValidatorFunctionWrapHandler, info: ValidationInfo
    ) -> int | str:
        try:
            train = handler(value)
        except ValidationError:
            raise ValueError(f"must be a whole number > 0 or 'all', got {value!r}") from None
        if train == "all" and info.data.get("source") == "synthetic":
            raise ValueError(
                "'all' needs a set of image files; source 'synthetic' draws as many images as "
                f"asked, so give a number, got {value!r}"
            )
        return train

    def cache_path(self) -> Path:
        """Where decoded and synthetic images are cached: `cache_dir`, or the user's cache
        folder.

        Not next to the images: dataset folders are often read-only or shared.
        """
        if self.cache_dir:
            return Path(self.cache_dir).expanduser().resolve()
        return default_cache_dir()

    def root_path(self) -> Path | None:
        """`root` as an absolute path (relative paths resolve against the working directory)."""
        return Path(self.root).expanduser().resolve() if self.root else None


def default_cache_dir() -> Path:
    """$XDG_CACHE_HOME/batchsearch, or ~/.cache/batchsearch when XDG_CACHE_HOME is unset."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser().resolve() / "batchsearch"
