"""The fused model's options (`FusedOptions`): its LEAM part's (asked of the LEAM kind, not imported) plus its own
four, which `train` spells --fused-epochs, --mentions, --fit-on and --terminology; saved in fusion.json."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, Mapping

from clinicode.errors import ConfigError
from clinicode.models.declarations import AsksOfRun, RunNeeds
from clinicode.models.leam.kind import KIND as LEAM_KIND

FIT_ON = ("train", "train+dev")   # which notes the parts without epochs learn from, in the end
OWN = ("fused_epochs", "mentions", "fit_on", "terminology")   # the options beyond its LEAM part's


@dataclass(frozen=True, kw_only=True)
class FusedOptions(LEAM_KIND.options_type, AsksOfRun):  # type: ignore[misc, valid-type]
    """The options a user chooses for the fused model: its LEAM part's, then its own."""

    code_attention: bool | None = None  # its LEAM part's attention; None: the fused kind chooses by the run, one per
                                    # code when the part learns no coders' mentions and has more than 100 codes,
                                    # one per note otherwise (round 21)
    fused_epochs: int = 30          # more than 100 codes (300 without mentions): its LEAM part's cap (min with
                                    # epochs); tfidf-lr, the titles and the mentions carry the rare codes
                                    # (docs/accuracy-tuning.md, rounds 14 and 19)
    mentions: bool = True           # learn each code's mentions from the training split's evidence spans, when it
                                    # has them (round 15; --no-mentions keeps their words out)
    fit_on: Literal["train+dev", "train"] = "train+dev"  # after dev has chosen the fusion and the threshold, refit
                                    # the parts that need no epochs (tfidf-lr, titles, mentions) on "train+dev", or
                                    # keep them as fitted on "train" (round 17)
    terminology: str | None = None  # a code<TAB>title file, or "auto" (the code system's own titles): its codes
                                    # outside the label set join it, scored from their titles (#50)

    def __post_init__(self) -> None:
        super().__post_init__()
        if isinstance(self.fused_epochs, bool) or not isinstance(self.fused_epochs, int) or self.fused_epochs < 1:
            raise ConfigError(f"--fused-epochs must be >= 1, got {self.fused_epochs}.")
        if not isinstance(self.mentions, bool):
            raise ConfigError(f"--mentions must be true or false, got {self.mentions!r}.")
        if self.terminology is not None and (not isinstance(self.terminology, str) or not self.terminology.strip()):
            raise ConfigError(f"--terminology must be a code<TAB>title file or 'auto', got {self.terminology!r}.")
        if self.fit_on not in FIT_ON:
            raise ConfigError(f"--fit-on must be {' or '.join(FIT_ON)}, got {self.fit_on!r}.")

    def leam_part(self, *, per_code: bool = False) -> Any:
        """The LEAM part's options (the LEAM kind's `options_type`); `code_attention` None becomes PER_CODE, the fused
        kind's choice for the run (`FusedKind.fit`: per code without mentions and with many codes, where one attention
        per note capped at --fused-epochs lost up to 0.06 micro-F1 to it, docs/accuracy-tuning.md, round 21)."""
        part = LEAM_KIND.options_type
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(part)}
        if values["code_attention"] is None:
            values["code_attention"] = per_code
        return part(**values)

    def leam_config(self, **data: Any) -> Any:
        """The LEAM part's model configuration (`ModelOptions.leam_config`): its options plus what the data decides."""
        return self.leam_part().leam_config(**data)

    def own(self) -> dict[str, Any]:
        """The options beyond the LEAM part's, by name (fusion.json's "options")."""
        return {name: getattr(self, name) for name in OWN}

    def run_needs(self) -> RunNeeds:
        """What the run prepares for `fit`: dev's codes and train+dev under --fit-on train+dev, the coders' spans
        unless --no-mentions, and the terminology."""
        return RunNeeds(dev_codes=self.fit_on == "train+dev", evidence=self.mentions, terminology=self.terminology)

    @classmethod
    def read_back(cls, part: Any, own: Mapping[str, Any]) -> FusedOptions:
        """The options of a saved model: its LEAM part's (PART, from model_config.json) and its own (OWN, fusion.json's
        "options", or a train_config.json written before they moved there)."""
        return cls(**dataclasses.asdict(part), **{k: v for k, v in own.items() if k in OWN})
