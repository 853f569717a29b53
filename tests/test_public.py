"""The house rules a change could quietly break, pinned: each package's public surface, one ask/tell
core, imports that flow one way, and docs that cite only files the repository has."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

# Every public module of the three packages and what it exports. A change to a surface is a
# change to this table too, made on purpose.
SURFACE = {
    "engine.bench": [
        "PplResult",
        "StreamTiming",
        "TpsResult",
        "TpsRuns",
        "Workload",
        "audit",
        "bench_serving",
        "chat_payload",
        "coefficient_of_variation",
        "harness_warm_up",
        "level_prompts",
        "long_prompts",
        "measure",
        "measure_lengths",
        "measure_load",
        "measure_ppl",
        "measure_tps",
        "node_info",
        "open_client",
        "parse_chat",
        "parse_counters",
        "percentiles",
        "read_counters",
        "run_trial",
        "stream_pass",
        "summarize",
        "tps_rule",
        "warm_up",
    ],
    "engine.config": [
        "CHALLENGE_DATA_ENV",
        "CLIENT_RULES",
        "KNOBS",
        "KNOBS_FILE",
        "MANIFESTS_DIR",
        "NAME_RULE",
        "PLACEHOLDERS",
        "PROFILES_FILE",
        "REPO_ROOT",
        "STUDIES_DIR",
        "BenchProfile",
        "Knob",
        "KnobValue",
        "KnobValues",
        "Manifest",
        "PplRecord",
        "Prompt",
        "StackLimit",
        "Target",
        "apply_knobs",
        "baseline_knobs",
        "consumed_knobs",
        "get_profile",
        "is_client_rule",
        "is_plain_name",
        "load_manifest",
        "load_ppl_records",
        "load_profiles",
        "load_prompts",
        "load_registry",
        "parse_assignments",
        "parse_knobs",
        "parse_manifest",
    ],
    "engine.files": ["load_json", "load_toml", "parse_json", "read_text"],
    "engine.host": [
        "FREE_FLOOR_MIB",
        "INTERVAL_S",
        "KEYS",
        "CpuTimes",
        "GcLog",
        "GpuState",
        "Telemetry",
        "client_cpus",
        "cpu_model",
        "cpu_times",
        "gpu_identity",
        "gpu_states",
        "gpu_uuids",
        "group_members",
        "held_after_stop",
        "host_probe",
        "per_cpu_times",
        "pinned",
        "pins",
        "provenance",
        "stolen_share",
        "thread_cpus_allowed",
        "visible_gpus",
        "wait_until_free",
    ],
    "engine.http": ["first_choice", "post_json"],
    "engine.install": ["InstallResult", "RECIPES", "Recipe", "default_venv", "install_stack", "is_installed", "main"],
    "engine.launch": [
        "MAX_LINE",
        "OWNER_ENV",
        "EngineProcess",
        "LaunchConfig",
        "LogPipe",
        "build_launch",
        "check_machine",
        "read_log_tail",
        "stop_groups",
    ],
    "engine.measurement": [
        "SUMMARY",
        "Checkpoint",
        "LengthBucket",
        "LoadLevel",
        "LoadRequest",
        "Measurement",
        "Partial",
        "Percentiles",
        "Stages",
        "Stop",
        "TrialOutcome",
        "TrialStatus",
        "bucket_bounds",
        "bucket_label",
        "by_length",
    ],
    "engine.reaper": ["engine_groups", "owned_groups", "stop_engine_groups"],
    "engine.secrets": [
        "REDACTED",
        "SECRET_MARKERS",
        "Scrubber",
        "is_secret_key",
        "redact_argv",
        "redact_env",
        "redact_manifest",
        "redact_text",
        "redact_value",
        "scrub_text",
        "secret_values",
    ],
    "engine.stacks": [
        "ADAPTERS",
        "MetricNames",
        "ORGANISERS",
        "PplWire",
        "RECIPES",
        "Recipe",
        "STEP_BUCKETS",
        "StackAdapter",
        "adapter_for",
        "boot_phases",
        "ppl_payload",
        "resolved_settings",
        "target_nlls",
    ],
    "engine.stackside": [
        "FOLDER_FILES",
        "HOOKS",
        "SPEC_RULE",
        "STACKWRAP",
        "STEP_BUCKETS",
        "WARMUP_KINDS",
        "SpecError",
        "Start",
        "StartError",
        "bridged",
        "fill",
        "format_cpus",
        "free_port",
        "gc_policy",
        "parse_cpus",
        "resolve_cpus",
        "start",
        "synthetic_prompts",
        "whole",
    ],
    "engine.reference.prepare": ["DEPENDENCIES", "PreparedModel", "default_cache_dir", "prepare_model"],
    "engine.reference.runtime": [
        "Decoder",
        "Generation",
        "Runtime",
        "SpecConfig",
        "SpecStats",
        "load_runtime",
        "resolve_device",
    ],
    "sweep.judgement": [
        "BETWEEN_PRIOR",
        "BETWEEN_PRIOR_DF",
        "DEFAULT_CONFIDENCE",
        "DEFAULT_CONFIRM_BOOTS",
        "DEFAULT_CONFIRM_MAX_BOOTS",
        "DEFAULT_TARGET",
        "FRONT_STOP",
        "GATE_STOP",
        "NOISE_FLOOR",
        "TPS_TOLERANCE",
        "Z",
        "FrontPoint",
        "Gate",
        "LevelVerdict",
        "MaxLoad",
        "Noise",
        "Served",
        "Slo",
        "StopKind",
        "chance_under_gate",
        "dominates",
        "faster",
        "front_point",
        "front_records",
        "front_ties",
        "goodput",
        "judge_serving",
        "level_goodput",
        "serving_front",
        "serving_point",
        "is_feasible",
        "lower_ppl",
        "max_load",
        "over_gate",
        "pareto_front",
        "pooled_log_sd",
        "tps_band",
        "verdict",
        "verifies",
        "within_tolerance",
    ],
    "sweep.interrupts": ["raise_interrupt"],
    "sweep.runs": ["RUN_DIR"],
    "sweep.store": [
        "DEFAULT_STORAGE_URL",
        "RECORD_VERSION",
        "BootKind",
        "BootRecord",
        "ClientOffset",
        "ConfirmationPlan",
        "FailKind",
        "Judge",
        "PromotionPlan",
        "Storage",
        "StudyRecord",
        "StudyRecords",
        "TrialMarks",
        "TrialRecord",
        "baseline_ppls",
        "boot_record",
        "failure_record",
        "open_existing",
        "open_storage",
        "outcome_record",
        "password_note",
        "ppl_limit",
        "read_record",
        "reused_record",
        "same_profile",
        "scores_sweep_references",
        "scrub_unfinished_logs",
        "shown_url",
        "trial_marks",
        "write_record",
        "write_trial_figures",
    ],
    "sweep.search": [
        "DEFAULT_SAMPLER",
        "FidelityPlan",
        "FidelitySpec",
        "KnobSpace",
        "MemoryRecords",
        "PlannedTrial",
        "SAMPLERS",
        "StudyCore",
        "StudySpec",
        "SweepConsole",
        "TrialWorker",
        "actor_options",
        "check_capacity",
        "collect",
        "export_results",
        "front_rule_for",
        "full_plan",
        "load_study",
        "print_dry_run",
        "ray_session",
        "run_study",
        "stage_counts",
        "stages_for",
        "study_path",
    ],
    "sweep.claims": [
        "Between",
        "Candidate",
        "Ceiling",
        "Claim",
        "ClientOffset",
        "Confirmation",
        "ConfirmationPlan",
        "Fit",
        "FreshBoots",
        "HETEROGENEITY",
        "INTERVAL",
        "Law",
        "Level",
        "MACHINE_TERMS",
        "MachineTerm",
        "NoiseParts",
        "PlannedBoot",
        "PromotionPlan",
        "Reading",
        "ServingClaim",
        "SloCeiling",
        "Spread",
        "Stop",
        "StopReason",
        "StudyClaims",
        "StudyEvidence",
        "Verdict",
        "VerdictName",
        "VerificationPlan",
        "WINDOW_S",
        "best_claim",
        "between_runs",
        "changed_knobs",
        "claim_for",
        "claims_of",
        "confirm",
        "confirmation_pair",
        "decompose",
        "fit",
        "goodput_reading",
        "held_load",
        "held_loads",
        "heldout_first",
        "interleave",
        "judge",
        "load_evidence",
        "machine_term",
        "odds_text",
        "plan_verification",
        "print_claims",
        "print_noise",
        "print_plan",
        "print_serving_claims",
        "print_verdicts",
        "promote",
        "ratio_reading",
        "row_mark",
        "screening_claim",
        "select",
        "select_trials",
        "serving_claims",
        "serving_outcome",
        "stopping",
        "study_noise",
        "tps_reading",
        "verify",
    ],
    "sweep.claims.cli": ["main"],
    "sweep.submission": [
        "CLAIM_FILE",
        "CheckOptions",
        "ClaimFile",
        "NothingToSubmit",
        "Submitted",
        "check_folder",
        "choose",
        "collect_wheels",
        "read_claim",
        "read_dependencies",
        "submit_study",
        "write_submission",
    ],
    "sweep.reading": ["OpenStudy", "open_study", "read_study"],
    "sweep.run": ["RunArgs", "main", "parse_args"],
    "sweep.verify": ["VerifyArgs", "main", "parse_args"],
    "sweep.submit": ["CheckArgs", "WriteArgs", "main", "parse_args"],
    "sweep.transfer": ["TransferArgs", "main", "parse_args"],
    "sweep.serving": [
        "DEFAULT_CONFIDENCE",
        "LevelVerdict",
        "MaxLoad",
        "TransferArgs",
        "main",
        "max_load",
        "parse_args",
        "probe_levels",
        "verdict",
    ],
    "dashboards.claims": ["claims_lines"],
    "dashboards": [
        "StudyData",
        "TrialRow",
        "attach_all",
        "attach_to_study",
        "history_figure",
        "knob_figure",
        "load_study_data",
        "pareto_figure",
        "study_data",
        "trials_frame",
    ],
    "dashboards.attach": ["GRAPH_ID", "NOTE_BEGIN", "NOTE_END", "attach_all", "attach_to_study", "study_note"],
    "dashboards.best": ["best_point", "write_best"],
    "dashboards.importance": ["OBJECTIVES", "importance_figure", "knob_importances", "slice_figures"],
    "dashboards.data": ["StudyData", "TrialRow", "load_study_data", "require_measured", "study_data"],
    "dashboards.export": ["EXPORTS_DIR", "export_study", "main"],
    "dashboards.figures": ["THEMES", "history_figure", "hover_text", "knob_figure", "pareto_figure"],
    "dashboards.images": ["find_browser", "write_images"],
    "dashboards.lengths": ["lengths_figure"],
    "dashboards.serve": ["ServeArgs", "main", "parse_args"],
    "dashboards.serving": ["ServingLine", "main", "serving_figure", "write_chart", "write_serving"],
    "dashboards.table": ["trials_frame"],
}


def _public_modules(package: str) -> list[str]:
    found = []
    for info in pkgutil.walk_packages(importlib.import_module(package).__path__, prefix=f"{package}."):
        parts = info.name.split(".")
        if any(p.startswith("_") for p in parts):
            continue
        if not info.ispkg or hasattr(importlib.import_module(info.name), "__all__"):  # a package that re-exports
            found.append(info.name)
    return found


@pytest.mark.parametrize("module", sorted(SURFACE))
def test_each_public_module_exports_what_is_pinned(module):
    loaded = importlib.import_module(module)
    assert sorted(loaded.__all__) == sorted(SURFACE[module])
    for name in loaded.__all__:
        assert hasattr(loaded, name), name


@pytest.mark.parametrize("package", ["engine", "sweep", "dashboards"])
def test_every_public_module_of_the_packages_is_pinned(package):
    skipped = {"engine.bench.__main__", "engine.reference.serve"}  # entry points: no importable surface
    assert sorted(set(_public_modules(package)) - skipped) == sorted(m for m in SURFACE if m.startswith(f"{package}."))


def _sources(*places: str) -> dict[Path, ast.Module]:
    """Every Python file under the folders named (or the file itself)."""
    paths = [
        p
        for place in places
        for p in ([REPO / place] if place.endswith(".py") else sorted((REPO / place).rglob("*.py")))
    ]
    return {p: ast.parse(p.read_text()) for p in paths}


def _calls(tree: ast.Module, names: set[str]) -> set[str]:
    return {
        node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (getattr(node.func, "attr", None) in names or getattr(node.func, "id", None) in names)
    }


def test_only_the_core_creates_enqueues_constrains_and_tells_a_study():
    policy = {"create_study", "enqueue_trial", "set_constraint", "tell"}
    callers = {
        path.relative_to(REPO).as_posix(): sorted(_calls(tree, policy))
        for path, tree in _sources("sweep", "benchmarks").items()
        if _calls(tree, policy)
    }
    assert callers == {"sweep/search/_core.py": sorted(policy)}


def test_every_boot_of_a_measurement_is_built_by_one_factory():
    # EngineProcess.for_profile: a boot's timeout and log as a profile sizes them, in one place; the constructor's
    # own timings are for the process's tests
    building = {
        path.relative_to(REPO).as_posix()
        for path, tree in _sources("engine", "sweep", "benchmarks", "dashboards").items()
        if _calls(tree, {"EngineProcess"})
    }
    assert building == set()


def _names(node: ast.AST) -> str:
    """The identifiers an expression reads, lower-cased and joined: ``r.ppl``, ``plan.gate``, ..."""
    return " ".join(
        (n.id if isinstance(n, ast.Name) else n.attr).lower()
        for n in ast.walk(node)
        if isinstance(n, (ast.Name, ast.Attribute))
    )


def _gate_comparisons(tree: ast.Module) -> int:
    """Comparisons of a PPL with a gate: one side reads a name holding "ppl", the other one holding "gate"."""
    count = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and not any(
            isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops
        ):
            sides = [_names(side) for side in (node.left, *node.comparators)]
            count += any("ppl" in a and "gate" in b for a in sides for b in sides if a is not b)
    return count


def test_ppl_is_compared_with_the_gate_in_one_module():
    # The gate's one comparison is sweep.judgement.over_gate; everything else calls it.
    comparing = {
        path.relative_to(REPO).as_posix(): n
        for path, tree in _sources("sweep", "benchmarks", "dashboards").items()
        if (n := _gate_comparisons(tree))
    }
    assert comparing == {"sweep/judgement.py": 1}


def _tolerance_comparisons(tree: ast.Module) -> int:
    """Comparisons with the organisers' 5%: one side reads a name holding "tps_tolerance"."""
    return sum(
        isinstance(node, ast.Compare)
        and any("tps_tolerance" in _names(side) for side in (node.left, *node.comparators))
        for node in ast.walk(tree)
    )


def test_the_organisers_rule_is_defined_in_one_module():
    # A re-run within 5% of the claim (sweep.judgement.within_tolerance, tps_band, verifies): nobody else compares
    # anything with TPS_TOLERANCE, or defines a rule of that name
    comparing = {
        path.relative_to(REPO).as_posix(): n
        for path, tree in _sources("sweep", "benchmarks", "dashboards", "engine").items()
        if (n := _tolerance_comparisons(tree))
    }
    assert comparing == {"sweep/judgement.py": 1}
    defining = {
        path.relative_to(REPO).as_posix()
        for path, tree in _sources("sweep", "benchmarks", "dashboards", "engine").items()
        for node in tree.body  # module level: Verdict.verifies (of its own claim) is a verdict's, not the rule
        if (isinstance(node, ast.FunctionDef) and node.name in ("within_tolerance", "tps_band", "verifies"))
        or (isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "TPS_TOLERANCE" for t in node.targets))
    }
    assert defining == {"sweep/judgement.py"}


def _imports(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


# The floors of engine/, bottom up: what runs beside a stack (standard library only), what a measurement gives, what a
# user wrote, the machine, the stacks, a stack's process, the commands that install a stack and reap a dead worker's,
# the benchmark of one configuration. Each imports only the floors below it (engine.files, engine.secrets and
# engine.http, at the bottom beside them, import nothing of the engine).
_ENGINE = (
    "engine.stackside",
    "engine.measurement",
    "engine.config",
    "engine.host",
    "engine.stacks",
    "engine.reference",
    "engine.launch",
    "engine.install",
    "engine.reaper",
    "engine.bench",
)
_ENGINE_FLOORS = [
    (name.replace(".", "/") + (".py" if name in ("engine.install", "engine.reaper") else ""), _ENGINE[i + 1 :])
    for i, name in enumerate(_ENGINE)
]
# The floors of sweep/, bottom up: the rules, what is stored, the search, the claims, the submission, the commands
_COMMANDS = ("sweep.run", "sweep.verify", "sweep.submit", "sweep.transfer", "sweep.serving")
_ABOVE_STORE = ("sweep.search", "sweep.claims", "sweep.submission", *_COMMANDS)


@pytest.mark.parametrize(
    ("folder", "never"),
    [
        ("cli.py", ("engine", "sweep", "dashboards", "benchmarks", "datagen", "studies", "tests")),
        ("engine", ("sweep", "dashboards", "benchmarks", "datagen", "tests")),
        ("engine/stackside", ("engine.files", "engine.secrets", "engine.http", "errors", "cli", "studies")),
        *_ENGINE_FLOORS,
        *((f"engine/{leaf}.py", _ENGINE) for leaf in ("files", "secrets", "http")),
        ("sweep", ("dashboards", "benchmarks", "datagen", "tests")),
        ("sweep/judgement.py", ("sweep", "dashboards", "benchmarks", "datagen", "tests")),
        ("sweep/store", _ABOVE_STORE),
        ("sweep/search", _ABOVE_STORE[1:]),
        ("sweep/claims", _ABOVE_STORE[2:]),
        ("sweep/submission", _COMMANDS),
        ("dashboards", ("benchmarks", "datagen", "tests")),
    ],
)
def test_imports_flow_down_never_back_up(folder, never):
    upward = {
        path.relative_to(REPO).as_posix(): sorted(
            i for i in _imports(tree) if any(i == n or i.startswith(f"{n}.") for n in never)
        )
        for path, tree in _sources(folder).items()
    }
    assert {k: v for k, v in upward.items() if v} == {}


def _module(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_module_of_the_project_imports_itself_in_a_circle():
    # every import counts, those made inside a function and for type checking only too: a circle of modules is one
    # piece of code in several files, whatever order Python happens to load them in
    sources = _sources("engine", "sweep", "dashboards", "benchmarks", "errors.py", "cli.py")
    known = {_module(path) for path in sources}

    def imported(name: str) -> str | None:
        """The module an import names: the name itself, or the package it takes a name from."""
        return next((n for n in (name, name.rpartition(".")[0]) if n in known), None)

    graph = {
        _module(path): {m for name in _imports(tree) if (m := imported(name)) not in (None, _module(path))}
        for path, tree in sources.items()
    }
    circles, state = [], {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                circles.append(" -> ".join([*trail[trail.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert circles == []


# A path-like name in a docstring or comment: folders and a file with an extension.
_CITED = re.compile(r"(?<![\w/.{-])((?:\.\./|[\w.-]+/)+[\w.-]+\.(?:md|py|toml|json|jsonl|csv|txt|sh))\b")
_CITED_DOC = re.compile(r"(?<![\w/.-])([\w-]+\.md)\b")  # a document by its name alone


def test_docs_and_docstrings_cite_only_files_the_repository_has():
    missing = []
    texts = [*(REPO / "docs").glob("*.md"), REPO / "README.md", *(REPO / "benchmarks/results").rglob("README.md")]
    for folder in ("engine", "sweep", "dashboards", "benchmarks", "datagen", "tests"):
        texts += sorted((REPO / folder).rglob("*.py"))
    texts += sorted((REPO / "studies").rglob("*.toml")) + sorted((REPO / "studies/manifests").glob("*.json"))
    documents = {p.name for p in REPO.rglob("*.md") if ".venv" not in p.parts}
    top_level = {p.name for p in REPO.iterdir()} | {p.name for p in (REPO / "studies").iterdir()}
    for path in texts:
        text = path.read_text()
        missing += [f"{path.relative_to(REPO)}: {name}" for name in _CITED_DOC.findall(text) if name not in documents]
        for cited in _CITED.findall(text):
            if "<" in cited or cited.startswith(("runs/", ".carry/", "/", "~")) or "{" in cited:
                continue  # written at run time (a run's folder, a GPU lease's staged pieces), or a placeholder
            if cited.split("/")[0] not in top_level and not cited.startswith("../"):
                continue  # a path inside some other package (sglang/bench_serving.py), not a citation of ours
            inside = [base / cited for base in (REPO, path.parent, REPO / "studies")]
            if not any(p.exists() and p.resolve().is_relative_to(REPO) for p in inside):
                missing.append(f"{path.relative_to(REPO)}: {cited}")
    assert missing == []


def test_the_ci_entry_point_and_the_readme_blocks_it_runs_parse_as_bash():
    # CI runs .ci/run on a fresh clone; a quoting slip there fails every submission before a test runs.
    checked = subprocess.run(["bash", "-n", str(REPO / ".ci/run")], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr
    blocks = re.findall(r"^```bash\n(.*?)^```$", (REPO / "README.md").read_text(), re.S | re.M)
    assert len(blocks) >= 2, "the README's setup and test blocks"
    for block in blocks[:2]:
        checked = subprocess.run(["bash", "-n", "-c", block], capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr
