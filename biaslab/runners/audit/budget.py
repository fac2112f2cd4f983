"""What an audit plan's hosted models will cost, before anything is sent: each billed unit surveyed (`collect.survey`:
its pending requests priced, nothing sent), the totals per model and for the whole plan, and the caps they must stay
under.

A model's `engine_args.max_cost` caps everything the plan sends that model (the sum over its units, not each unit on
its own), and the plan's `max_cost` caps the sum over every model. A model over its cap has none of its billed units
run; a plan over its cap has none of its billed units run. Units without prices cannot be checked against a cap:
`collect` refuses them itself (`--max-cost needs --price-in and --price-out`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .plan import Plan, Unit

__all__ = ["Budget", "billed", "budget"]


def billed(unit: Unit) -> bool:
    """Whether a unit's engine bills per request: it offers a cost cap (`--max-cost`, the chat APIs' flag)."""
    from ...engines import declaration, get

    return any(flag.field == "max_cost" for flag in declaration(get(unit.config.backend)).flags)


@dataclass
class Budget:
    """The priced units (unit name -> (model, cost or None, the unit's estimate line)), the total per model and
    overall (None where a unit has no price), the caps, and the units refused with why (unit name -> line)."""

    units: dict[str, tuple[str, float | None, str]] = field(default_factory=dict)
    per_model: dict[str, float | None] = field(default_factory=dict)
    caps: dict[str, float | None] = field(default_factory=dict)
    total: float | None = 0.0
    plan_cap: float | None = None
    refused: dict[str, str] = field(default_factory=dict)

    def lines(self) -> list[str]:
        """One line per model with billed work and one for the plan: the estimated total and its cap."""
        def usd(value: float | None) -> str:
            return "cost unknown (no prices)" if value is None else f"about ${value:.4f}"

        out = []
        for model, cost in self.per_model.items():
            cap = self.caps.get(model)
            over = cap is not None and cost is not None and cost > cap
            out.append(f"{model}: {usd(cost)} for its units" + (f" (max_cost ${cap:g}" +
                                                                  (": OVER, none of them will run)" if over else ")")
                                                                  if cap is not None else ""))
        if self.per_model:
            over = self.plan_cap is not None and self.total is not None and self.total > self.plan_cap
            out.append(f"plan: {usd(self.total)} in all" + (f" (max_cost ${self.plan_cap:g}" +
                                                             (": OVER, no hosted unit will run)" if over else ")")
                                                             if self.plan_cap is not None else ""))
        return out


def _add(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a + b


def budget(plan: Plan, units: list[Unit], surveyed: dict | None = None) -> Budget:
    """Price every billed unit with something pending (read-only), total per model and for the plan, and refuse
    (in `Budget.refused`) every billed unit of a model over its cap, or every billed unit when the plan is over its
    own. `surveyed` (unit name -> `collect.Survey`) holds surveys already made (the dry run's), not made again."""
    from ..collect import survey

    out = Budget(plan_cap=plan.max_cost)
    for unit in units:
        if not billed(unit):
            continue
        found = (surveyed or {}).get(unit.name) or survey(unit.config)
        if not found.pending:
            continue
        out.units[unit.name] = (unit.model, found.cost, found.estimate)
        out.per_model[unit.model] = _add(out.per_model.get(unit.model, 0.0), found.cost)
        out.caps[unit.model] = unit.config.engine_args.get("max_cost")
        out.total = _add(out.total, found.cost)
    for name, (model, _, _) in out.units.items():
        cost, cap = out.per_model[model], out.caps.get(model)
        if cap is not None and cost is not None and cost > cap:
            out.refused[name] = (f"{model}'s units would cost about ${cost:.4f} together, above its max_cost "
                                 f"${cap:g}: nothing was sent to it")
        elif out.plan_cap is not None and out.total is not None and out.total > out.plan_cap:
            out.refused[name] = (f"the plan's hosted units would cost about ${out.total:.4f} together, above its "
                                 f"max_cost ${out.plan_cap:g}: nothing was sent")
    return out
