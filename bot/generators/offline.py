"""The offline generator: deterministic, no network. Request words -> spec (bot.request);
spec expression -> IR -> PyTorch reference, Triton kernel, tests and bench plan."""
from __future__ import annotations

import json

from bot import ir, lower_torch, testgen, training
from bot import spec as specmod
from bot.generators.interface import Artifact, GenerationError, GenRequest
from bot.codegen.kernel_file import parse_options
from bot.request import parse_request, pasted_source
from runner import protocol


class OfflineGenerator:
    name = "offline"

    def generate(self, req: GenRequest) -> Artifact:
        if req.stage == "spec":
            spec, notes = parse_request(req.request, req.feedback, req.backend)
            return Artifact(specmod.dumps(spec), specmod.summary(spec), notes)
        spec = self._approved_spec(req)
        if req.stage == "reference" and spec.get("reference_class"):
            self._refuse_free_text(req, "reference")
            return Artifact(pasted_source(req.request), {"module": f"the pasted {spec['reference_class']}, verbatim",
                                                         "computes": spec.get("expression") or spec["name"]})
        node = specmod.parse_expression(spec)
        if req.stage == "reference":
            self._refuse_free_text(req, "reference")
            return Artifact(lower_torch.reference_source(spec, node), {"function": f"{spec['name']}(...)",
                                                                      "computes": spec["expression"]})
        if req.stage == "kernel":
            return self._kernel(req, spec, node)
        if req.stage == "reference_test":
            self._refuse_free_text(req, "reference test")
            return Artifact(testgen.reference_test_source(spec), _matrix_summary(spec))
        if req.stage == "kernel_test":
            self._refuse_free_text(req, "kernel test")
            return Artifact(testgen.kernel_test_source(spec), _matrix_summary(spec))
        self._refuse_free_text(req, "bench plan")
        plan = testgen.bench_plan(spec)
        return Artifact(json.dumps(plan, indent=2) + "\n", {"versions": ", ".join(plan["versions"]),
                                                             **_matrix_summary(spec)})

    @staticmethod
    def _approved_spec(req: GenRequest) -> dict:
        if "spec" not in req.approved:
            raise GenerationError("no approved spec yet; approve stage 1 first")
        try:
            return specmod.loads(req.approved["spec"])
        except specmod.SpecError as e:
            raise GenerationError(f"the approved spec is not usable: {e}") from None

    @staticmethod
    def _kernel(req: GenRequest, spec: dict, node) -> Artifact:
        options = parse_options(req.feedback)
        if req.feedback and not options:
            raise GenerationError(
                "the offline generator understands kernel corrections like 'block size 2048' or "
                "'num_warps 8'; for anything else, edit the code (paste a ```python block) or correct the spec")
        if options and spec.get("training"):
            raise GenerationError("a training kernel keeps each part's default config; block size and warps are "
                                  "not set in review for it")
        try:
            source = training.kernel_source(spec, node) if spec.get("training") else ir.kernel_source(spec, node,
                                                                                                      options)
        except ValueError as e:
            raise GenerationError(str(e)) from None
        notes = [f"the previous kernel failed its test; the offline generator is deterministic, so this "
                 f"revision is the same unless a correction changes it:\n{req.failure[:500]}"] if req.failure else []
        summary = {"entry": f"{spec['name']}(...)", "computes": spec["expression"]}
        if options:
            summary["options"] = ", ".join(f"{k}={v}" for k, v in options.items())
        return Artifact(source, summary, notes)

    @staticmethod
    def _refuse_free_text(req: GenRequest, what: str) -> None:
        if req.feedback:
            raise GenerationError(
                f"the offline generator cannot apply free-text corrections to the {what}; edit it "
                "(paste a ```python or ```json block), or correct the spec, which it re-reads")


def _matrix_summary(spec: dict) -> dict[str, str]:
    cases, variants = protocol.cases(spec), protocol.dtype_variants(spec)
    return {"cases": ", ".join(c.label for c in cases),
            "dtypes": ", ".join(protocol.variant_label(v) for v in variants),
            "matrix": f"{len(cases)} cases x {len(variants)} dtypes"}
