"""Read ``BA_SEMANTIC_DIR`` (dbt Semantic Layer YAML) into a :class:`SemanticLayer`.

Layout: ``<dir>/<source>/*.yml``, one folder per ``BA_DATASOURCES`` source name (``demo`` is
the built-in demo data unless a configured source has that name). Files use dbt's own format,
so teams reuse what they already have::

    semantic_models:
      - name: orders
        model: ref('orders')            # table `orders` of the folder's source
        node_relation: {schema_name: sales}   # optional: schema-qualify it
        defaults: {agg_time_dimension: ordered_at}
        entities: [{name: order_id, type: primary}]
        dimensions: [{name: ordered_at, type: time, type_params: {time_granularity: day}}]
        measures: [{name: gmv, agg: sum, expr: amount}]
    metrics:
      - {name: gmv, type: simple, type_params: {measure: gmv}}

Each object is checked against dbt-semantic-interfaces' JSON schema and pydantic models, then
the source's whole manifest goes through its transformations and its semantic validator (the
same rules dbt and MetricFlow apply). Any problem raises :class:`SemanticModelError` naming the
file, the line and the reason. Without ``BA_SEMANTIC_DIR`` the bundled demo model is used.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from agent_core.data.source_config import DataSourceConfig
from agent_core.semantic.errors import SemanticModelError
from agent_core.semantic.model import (
    DEMO_SOURCE,
    GRAINS,
    Dimension,
    Entity,
    Grain,
    Measure,
    Metric,
    MetricInput,
    SemanticLayer,
    SemanticModel,
    SourceDialect,
    SourceSemantics,
    Table,
)

BUNDLED_DIR = Path(__file__).resolve().parent / "bundled"
_DIALECTS: dict[str, SourceDialect] = {"postgresql": "postgres", "mysql": "mysql", "duckdb": "duckdb"}
_REF = re.compile(r"""^\s*ref\(\s*['"]([A-Za-z0-9_$.-]+)['"]\s*\)\s*$""")
# dbt's Jinja filter references, e.g. {{ Dimension('customer__region') }} or
# {{ TimeDimension('metric_time', 'month') }}; rewritten to the names `where` filters use.
_FILTER_REF = re.compile(
    r"""\{\{\s*(Dimension|TimeDimension|Entity)\(\s*['"]([a-z0-9_]+)['"]\s*(?:,\s*['"]([a-z]+)['"]\s*)?\)\s*\}\}"""
)
_MAX_ISSUES = 5


def load_semantic_layer(semantic_dir: Path | None, datasources: Mapping[str, DataSourceConfig]) -> SemanticLayer:
    """The validated metric definitions of every source; raises :class:`SemanticModelError`."""
    return _load_cached(semantic_dir.resolve() if semantic_dir else None, tuple(sorted(
        (name, cfg.kind) for name, cfg in datasources.items()
    )))  # fmt: skip


@functools.lru_cache(maxsize=8)
def _load_cached(semantic_dir: Path | None, kinds: tuple[tuple[str, str], ...]) -> SemanticLayer:
    # Cached: tools and start-up checks in one process read the files once.
    dialects: dict[str, SourceDialect] = {DEMO_SOURCE: "duckdb"}
    dialects.update({name: _DIALECTS[kind] for name, kind in kinds})
    root = semantic_dir or BUNDLED_DIR
    if not root.is_dir():
        raise SemanticModelError(f"BA_SEMANTIC_DIR: {root} is not a directory.")
    sources: dict[str, SourceSemantics] = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        if folder.name not in dialects:
            known = ", ".join(sorted(dialects))
            raise SemanticModelError(f"{folder}: no data source is called {folder.name!r} (BA_DATASOURCES names: {known}).")
        files = sorted([*folder.glob("*.yml"), *folder.glob("*.yaml")])
        if files:
            sources[folder.name] = _load_source(folder.name, dialects[folder.name], files)
    return SemanticLayer(sources=sources)


def _load_source(source: str, dialect: SourceDialect, files: list[Path]) -> SourceSemantics:
    from dbt_semantic_interfaces.implementations.project_configuration import PydanticProjectConfiguration
    from dbt_semantic_interfaces.implementations.semantic_manifest import PydanticSemanticManifest
    from dbt_semantic_interfaces.transformations.semantic_manifest_transformer import (
        PydanticSemanticManifestTransformer,
    )
    from dbt_semantic_interfaces.validations.semantic_manifest_validator import SemanticManifestValidator

    semantic_models: list[Any] = []
    metrics: list[Any] = []
    for path in files:
        file_models, file_metrics = _parse_file(path)
        semantic_models += file_models
        metrics += file_metrics
    manifest = PydanticSemanticManifest(
        semantic_models=semantic_models,
        metrics=metrics,
        project_configuration=PydanticProjectConfiguration(time_spine_table_configurations=[], time_spines=[]),
    )
    validator = SemanticManifestValidator[PydanticSemanticManifest]()
    try:
        transformed = PydanticSemanticManifestTransformer.transform(manifest)
    except Exception as exc:  # the transformer reports inconsistent definitions by raising
        # The validator on the untransformed manifest usually says the same with file and line.
        _raise_issues(files, validator.validate_semantic_manifest(manifest))
        raise SemanticModelError(f"{_locate(manifest, str(exc)) or files[0].parent}: {exc}") from None
    _raise_issues(files, validator.validate_semantic_manifest(transformed))
    return _convert(source, dialect, transformed, tuple(str(p) for p in files))


def _locate(manifest: Any, message: str) -> str | None:
    """``file:line`` of the first metric that refers to a name quoted in ``message``."""
    quoted = set(re.findall(r"'([a-z0-9_]+)'", message))
    for metric in manifest.metrics:
        params = metric.type_params
        inputs = [params.numerator, params.denominator, params.measure, *(params.metrics or ())]
        if params.cumulative_type_params is not None:
            inputs.append(params.cumulative_type_params.metric)
        if quoted & {i.name for i in inputs if i is not None} and metric.metadata is not None:
            return f"{metric.metadata.repo_file_path}:{metric.metadata.file_slice.start_line_number}"
    return None


def _raise_issues(files: list[Path], results: Any) -> None:
    if results.has_blocking_issues:
        issues = [issue.as_readable_str() for issue in results.errors]
        raise SemanticModelError(_issue_list(f"{files[0].parent}: invalid semantic layer", issues))


# --- parsing one file -----------------------------------------------------------------------


def _parse_file(path: Path) -> tuple[list[Any], list[Any]]:
    """The file's semantic models and metrics as dbt-semantic-interfaces pydantic objects."""
    import jsonschema
    import yaml
    from dbt_semantic_interfaces.implementations.metric import PydanticMetric
    from dbt_semantic_interfaces.implementations.semantic_model import PydanticSemanticModel
    from dbt_semantic_interfaces.parsing.schemas import metric_validator, semantic_model_validator
    from dbt_semantic_interfaces.parsing.yaml_loader import PARSING_CONTEXT_KEY, YamlConfigLoader

    try:
        documents = list(YamlConfigLoader.load_all_with_context(str(path), path.read_text(encoding="utf-8")))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        reason = getattr(exc, "problem", None) or str(exc)
        raise SemanticModelError(f"{path}:{line}: not valid YAML: {reason}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SemanticModelError(f"{path}: cannot be read: {exc}") from None
    models: list[Any] = []
    metrics: list[Any] = []
    for document in documents:
        if document is None:
            continue
        if not isinstance(document, dict):
            raise SemanticModelError(f"{path}:1: expected `semantic_models:` and `metrics:` lists")
        line = _line(document)
        unknown = set(document) - {"semantic_models", "metrics", "version", PARSING_CONTEXT_KEY}
        if unknown:
            raise SemanticModelError(
                f"{path}:{line}: unexpected top-level key(s) {', '.join(sorted(unknown))}; "
                "expected `semantic_models:` and `metrics:`"
            )
        for key, validator, parse, into in (
            ("semantic_models", semantic_model_validator, PydanticSemanticModel.parse_obj, models),
            ("metrics", metric_validator, PydanticMetric.parse_obj, metrics),
        ):
            items = document.get(key) or []
            if not isinstance(items, list):
                raise SemanticModelError(f"{path}:{line}: `{key}` must be a list")
            for item in items:
                if not isinstance(item, dict):
                    raise SemanticModelError(f"{path}:{line}: each entry of `{key}` must be a mapping")
                item = _semantic_model_from_dbt(path, item) if key == "semantic_models" else _metric_from_dbt(item)
                error = jsonschema.exceptions.best_match(validator.iter_errors(item))
                if error is not None:
                    where = _line_at(item, list(error.absolute_path))
                    field = ".".join(str(p) for p in error.absolute_path) or _name(item)
                    raise SemanticModelError(f"{path}:{where}: {_name(item)}: {field}: {error.message}")
                try:
                    into.append(parse(item))
                except Exception as exc:  # pydantic and dbt-semantic-interfaces parsing errors
                    reason = " ".join(str(exc).split())
                    raise SemanticModelError(f"{path}:{_line(item)}: {_name(item)}: {reason}") from None
    return models, metrics


def _semantic_model_from_dbt(path: Path, item: dict[str, Any]) -> dict[str, Any]:
    """dbt's `model: ref('t')` (+ optional `node_relation`) as the `node_relation` dbt-semantic-
    interfaces expects."""
    item = dict(item)
    model = item.pop("model", None)
    relation = dict(item.get("node_relation") or {})
    if model is not None:
        match = _REF.match(str(model))
        if match is None:
            raise SemanticModelError(f"{path}:{_line(item)}: {_name(item)}: model must be ref('table_name'), not {model!r}")
        relation.setdefault("alias", match.group(1))
    if "alias" not in relation:
        raise SemanticModelError(f"{path}:{_line(item)}: {_name(item)}: needs `model: ref('table_name')`")
    relation.setdefault("schema_name", "")
    item["node_relation"] = relation
    return item


def _metric_from_dbt(item: dict[str, Any]) -> dict[str, Any]:
    """dbt accepts a bare metric name where dbt-semantic-interfaces wants `{name: ...}`."""
    item = dict(item)
    params = dict(item.get("type_params") or {})
    for key in ("numerator", "denominator"):
        if isinstance(params.get(key), str):
            params[key] = {"name": params[key]}
    if isinstance(params.get("metrics"), list):
        params["metrics"] = [{"name": m} if isinstance(m, str) else m for m in params["metrics"]]
    if params:
        item["type_params"] = params
    return item


def _line(mapping: Mapping[str, Any]) -> int:
    from dbt_semantic_interfaces.parsing.yaml_loader import PARSING_CONTEXT_KEY

    context = mapping.get(PARSING_CONTEXT_KEY)
    return int(context.start_line) if context is not None else 1


def _line_at(item: Any, path: list[Any]) -> int:
    """The line of the deepest mapping on ``path`` inside ``item`` (where the error is)."""
    line = _line(item)
    node = item
    for part in path:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            break
        if isinstance(node, dict):
            line = _line(node)
    return line


def _name(item: Mapping[str, Any]) -> str:
    return str(item.get("name") or "unnamed")


def _issue_list(head: str, issues: list[str]) -> str:
    shown = "\n  ".join(" ".join(i.split()) for i in issues[:_MAX_ISSUES])
    more = f"\n  … and {len(issues) - _MAX_ISSUES} more" if len(issues) > _MAX_ISSUES else ""
    return f"{head}:\n  {shown}{more}"


# --- conversion to the compiler's model -----------------------------------------------------


def _convert(source: str, dialect: SourceDialect, manifest: Any, files: tuple[str, ...]) -> SourceSemantics:
    models = tuple(_model(sm) for sm in manifest.semantic_models)
    metrics = tuple(_metric(m) for m in manifest.metrics if not m.type_params.is_private)
    return SourceSemantics(source=source, dialect=dialect, models=models, metrics=metrics, files=files)


def _model(sm: Any) -> SemanticModel:
    relation = sm.node_relation
    default_time = sm.defaults.agg_time_dimension if sm.defaults else None
    dimensions = tuple(
        Dimension(
            name=d.name,
            expr=d.expr or d.name,
            description=d.description,
            time_granularity=_grain(d.type_params.time_granularity) if d.type.value == "time" and d.type_params else None,
        )
        for d in sm.dimensions
    )
    measures = tuple(
        Measure(
            name=m.name,
            agg=m.agg.value,
            expr=str(m.expr) if m.expr is not None else m.name,
            agg_time_dimension=m.agg_time_dimension or default_time or "",
            percentile=m.agg_params.percentile if m.agg_params else None,
        )
        for m in sm.measures
    )
    return SemanticModel(
        name=sm.name,
        table=Table(name=relation.alias, schema=relation.schema_name or None, database=relation.database),
        entities=tuple(Entity(name=e.name, type=e.type.value, expr=e.expr or e.name) for e in sm.entities),
        dimensions=dimensions,
        measures=measures,
        description=sm.description,
        primary_entity=sm.primary_entity or next((e.name for e in sm.entities if e.type.value == "primary"), None),
    )


def _metric(m: Any) -> Metric:
    params = m.type_params
    common: dict[str, Any] = {
        "name": m.name,
        "type": m.type.value,
        "description": m.description,
        "label": m.label,
        "filter": _filter_text(m.filter),
    }
    kind = m.type.value
    if kind == "simple":
        aggregation = params.metric_aggregation_params
        measure = params.measure.name if params.measure else m.name
        return Metric(
            **common,
            measure=measure,
            semantic_model=aggregation.semantic_model if aggregation else None,
            fill_nulls_with=params.fill_nulls_with,
        )
    if kind == "ratio":
        return Metric(**common, numerator=_input(params.numerator), denominator=_input(params.denominator))
    if kind == "derived":
        return Metric(**common, expr=params.expr, inputs=tuple(_input(i) for i in params.metrics or ()))
    if kind == "cumulative":
        cumulative = params.cumulative_type_params
        window = cumulative.window if cumulative else params.window
        grain_to_date = cumulative.grain_to_date if cumulative else params.grain_to_date
        return Metric(
            **common,
            base=_input(cumulative.metric) if cumulative and cumulative.metric else MetricInput(name=params.measure.name),
            window=(window.count, _grain(window.granularity)) if window else None,
            grain_to_date=_grain(getattr(grain_to_date, "value", grain_to_date)) if grain_to_date else None,
            period_agg=cumulative.period_agg.value if cumulative else "first",
        )
    raise SemanticModelError(f"metric {m.name!r}: {kind} metrics are not supported (simple, ratio, derived, cumulative)")


def _input(i: Any) -> MetricInput:
    offset = i.offset_window
    return MetricInput(
        name=i.name,
        alias=i.alias,
        filter=_filter_text(i.filter),
        offset_window=(offset.count, _grain(offset.granularity)) if offset else None,
    )


def _grain(value: Any) -> Grain:
    text = str(getattr(value, "value", value)).lower().rstrip("s")
    if text not in GRAINS:
        raise SemanticModelError(f"time granularity {text!r} is not supported ({', '.join(GRAINS)})")
    return cast(Grain, text)


def _filter_text(where: Any) -> str | None:
    """A dbt filter (Jinja templates over dimensions) as a plain `where` filter text."""
    if where is None or not where.where_filters:
        return None
    parts = [f"({_without_jinja(f.where_sql_template)})" for f in where.where_filters]
    return " AND ".join(parts)


def _without_jinja(template: str) -> str:
    def name(match: re.Match[str]) -> str:
        kind, ref, grain = match.groups()
        return f"{ref}__{grain}" if kind == "TimeDimension" and grain else ref

    text = _FILTER_REF.sub(name, template)
    if "{{" in text or "{%" in text:
        raise SemanticModelError(f"filter {template!r}: only Dimension(), TimeDimension() and Entity() references are supported")
    return text
