"""What model-written SQL may call and read: the SQL guard's allowlists, kept as data.

A read-only analytical query needs aggregates, window functions, arithmetic, string, date/time,
conditional, cast, JSON and array functions, and a few catalog views to find its way around.
Everything else — functions that run SQL held in a string (``ts_stat``, ``query_to_xml``,
DuckDB ``query``), read files or reach the network (``pg_read_file``, ``read_csv``,
``load_file``), signal or reconfigure the server (``pg_terminate_backend``,
``pg_reload_conf``, ``set_config``), take locks (``pg_advisory_lock``, ``GET_LOCK``), touch
sequences or reveal the server's paths (``current_setting``, ``duckdb_databases``) — is
refused because it is *not listed here*, not because someone remembered to deny it.

Functions are matched two ways (see :mod:`agent_core.data.sql_guard`):

* **by sqlglot expression class** for functions sqlglot models (``exp.Sum``,
  ``exp.DateTrunc``, ``exp.JSONExtract`` …). A class stands for the same function in every
  dialect, so these sets are shared. Class names are resolved with ``getattr`` so an older or
  newer sqlglot without one of them still imports (a missing class is simply not allowed: the
  guard fails closed); ``tests/test_adversarial_sql.py`` checks they all resolve here;
* **by SQL name, per dialect,** for functions sqlglot parses as ``exp.Anonymous`` (it has no
  class for them). Names are lower-case ASCII.

Catalog reads are allowlisted per dialect too: ``information_schema`` views that describe
tables and columns and, for PostgreSQL, the ``pg_catalog`` views a describe/list query needs;
views with columns that hold row values or row counts are allowlisted by column
(:data:`CATALOG_COLUMNS`).
Other tables in system schemas (``pg_authid``, ``pg_shadow``, ``pg_settings``,
``pg_stat_activity``, ``mysql.user``, ``performance_schema.*``, DuckDB ``duckdb_settings`` …)
are refused. The application's own catalog queries (``sources.list_source_tables`` …) do not go
through the guard: they are our SQL, not the model's.

Timing: nothing whose purpose is to spend time is listed (``pg_sleep``, ``SLEEP``,
``BENCHMARK``): a query's running time must not be a channel, and a delay per row made one
(``WHERE pg_sleep(0.02) IS NOT NULL`` took time in proportion to the rows it saw). The row
filter's fence (:mod:`agent_core.governance.rewrite`) keeps any other costly expression to the
rows the asker may see.

To allow a new function: add it to the right category below and add a query using it to
``tests/test_sql_guard.py``. Only add functions that compute on their arguments; anything that
reads or writes outside the query's own rows, runs SQL text, or changes session or server state
does not belong here.
"""

from __future__ import annotations

from sqlglot import exp

Dialect = str  # "duckdb", "postgres" or "mysql" (sqlglot dialect names)
DIALECTS: tuple[str, ...] = ("duckdb", "postgres", "mysql")


def _classes(*names: str) -> frozenset[type[exp.Expr]]:
    """sqlglot expression classes by name; names the installed sqlglot lacks are skipped."""
    found = (getattr(exp, name, None) for name in names)
    return frozenset(c for c in found if isinstance(c, type) and issubclass(c, exp.Func))


def _ordered(text: str) -> tuple[str, ...]:
    """Lower-case names from a whitespace-separated list, in order."""
    return tuple(text.split())


def _names(text: str) -> frozenset[str]:
    """A frozenset of lower-case function names from a whitespace-separated list."""
    return frozenset(text.split())


# =============================================================================================
# Functions known to sqlglot, by expression class (shared by all dialects)
# =============================================================================================

# Aggregates: counts, sums, statistics, percentiles, collecting values into a list or string.
AGGREGATE_CLASSES = _classes(
    "Count", "Sum", "Avg", "Min", "Max", "Stddev", "StddevPop", "StddevSamp", "Variance",
    "VariancePop", "Corr", "CovarPop", "CovarSamp", "RegrAvgx", "RegrAvgy", "RegrCount",
    "RegrIntercept", "RegrR2", "RegrSlope", "RegrSxx", "RegrSxy", "RegrSyy", "Median", "Mode",
    "Quantile", "ApproxQuantile", "ApproxQuantiles", "PercentileCont", "PercentileDisc",
    "ApproxDistinct", "ApproxTopK", "AnyValue", "ArgMax", "ArgMin", "First", "Last", "ArrayAgg",
    "ArrayConcatAgg", "ArrayUniqueAgg", "GroupConcat", "CountIf", "LogicalAnd", "LogicalOr",
    "BitwiseAndAgg", "BitwiseOrAgg", "BitwiseXorAgg", "Kurtosis", "Skewness", "JSONArrayAgg",
    "JSONObjectAgg", "JSONBObjectAgg", "Grouping", "GroupingId",
)  # fmt: skip

# Window functions (ranking and offsets); aggregates above also work with OVER (...).
WINDOW_CLASSES = _classes(
    "RowNumber", "Rank", "DenseRank", "PercentRank", "CumeDist", "Ntile", "Lag", "Lead",
    "FirstValue", "LastValue", "NthValue",
)  # fmt: skip

# Arithmetic and math.
MATH_CLASSES = _classes(
    "Abs", "Ceil", "Floor", "Round", "Trunc", "Sign", "Sqrt", "Cbrt", "Pow", "Exp", "Ln", "Log",
    "Pi", "Radians", "Degrees", "Sin", "Cos", "Tan", "Cot", "Asin", "Acos", "Atan", "Atan2",
    "Sinh", "Cosh", "Tanh", "Asinh", "Acosh", "Atanh", "Rand", "Factorial", "IsNan", "IsInf",
    "WidthBucket", "SafeDivide", "Greatest", "Least",
)  # fmt: skip

# Text: case, length, trimming, padding, slicing, searching, hashing, encoding, formatting.
STRING_CLASSES = _classes(
    "Lower", "Upper", "Initcap", "Length", "BitLength", "ByteLength", "Trim", "Pad", "Substring",
    "Left", "Right", "Replace", "Reverse", "Repeat", "Concat", "ConcatWs", "Ascii", "Chr",
    "Unicode", "StrPosition", "Translate", "Split", "SplitPart", "StringToArray",
    "ArrayToString", "Space", "SubstringIndex", "Elt", "Stuff", "Format", "NumberToStr",
    "Overlay", "Normalize", "StartsWith", "EndsWith", "Contains", "Levenshtein",
    "JarowinklerSimilarity", "Soundex", "Collate", "WeightString", "Hex", "Unhex", "LowerHex",
    "ToBase64", "FromBase64", "ToBinary", "Encode", "Decode", "MD5", "MD5Digest", "SHA", "SHA2",
    "SHA1Digest", "SHA2Digest", "Uuid", "ToChar", "ToNumber",
)  # fmt: skip

# Regular expressions.
REGEX_CLASSES = _classes(
    "RegexpLike", "RegexpILike", "RegexpReplace", "RegexpExtract", "RegexpExtractAll",
    "RegexpFullMatch", "RegexpSplit", "RegexpCount", "RegexpInstr", "RegexpSubstr",
)  # fmt: skip

# Dates and times: current time, parts, truncation, arithmetic, parsing and formatting.
DATETIME_CLASSES = _classes(
    "CurrentDate", "CurrentTime", "CurrentTimestamp", "CurrentDatetime", "CurrentTimezone",
    "Localtime", "Localtimestamp", "UtcDate", "UtcTime", "UtcTimestamp", "Extract", "DateTrunc",
    "TimestampTrunc", "DatetimeTrunc", "TimeTrunc", "DateAdd", "DateSub", "DateDiff",
    "DatetimeAdd", "DatetimeSub", "DatetimeDiff", "TimestampAdd", "TimestampSub",
    "TimestampDiff", "TimeAdd", "TimeSub", "TimeDiff", "DateBin", "DateFromParts",
    "TimeFromParts", "TimestampFromParts", "MakeInterval", "StrToDate", "StrToTime", "StrToUnix",
    "TimeToStr", "TimeToUnix", "UnixToTime", "UnixToStr", "UnixToTimeStr", "TimeStrToDate",
    "TimeStrToTime", "TimeStrToUnix", "TimeToTimeStr", "DateToDateStr", "DateStrToDate",
    "TsOrDsToDate", "TsOrDsToTimestamp", "TsOrDsToDatetime", "TsOrDsToTime", "TsOrDsAdd",
    "TsOrDsDiff", "TsOrDsToDateStr", "Date", "Time", "Timestamp", "Datetime", "Year", "Month",
    "Day", "Quarter", "Week", "WeekOfYear", "DayOfWeek", "DayOfWeekIso", "DayOfMonth",
    "DayOfYear", "Hour", "Minute", "Second", "Dayname", "Monthname", "LastDay", "NextDay",
    "PreviousDay", "AddMonths", "MonthsBetween", "JustifyDays", "JustifyHours",
    "JustifyInterval", "ConvertTimezone", "ToDays", "YearOfWeek", "YearOfWeekIso", "UnixDate",
    "UnixSeconds", "UnixMillis", "UnixMicros",
)  # fmt: skip

# Conditionals and NULL handling.
CONDITIONAL_CLASSES = _classes("Case", "If", "Coalesce", "Nullif", "Nvl2")

# Casts and type inspection (CAST, TRY_CAST, ::, CONVERT … USING, typeof).
CAST_CLASSES = _classes("Cast", "TryCast", "CastToStrType", "ConvertToCharset", "Typeof")

# JSON accessors, operators (->, ->>, #>, @>, ?) and constructors.
JSON_CLASSES = _classes(
    "JSONExtract", "JSONExtractScalar", "JSONExtractArray", "JSONBExtract",
    "JSONBExtractScalar", "JSONBContains", "JSONBContainsTopKey", "JSONBContainsAnyTopKeys",
    "JSONBContainsAllTopKeys", "JSONBExists", "JSONBPathExists", "JSONBDeleteAtPath",
    "JSONExists", "JSONKeys", "JSONType", "JSONArray", "JSONObject", "JSONArrayAppend",
    "JSONArrayInsert", "JSONArrayContains", "JSONRemove", "JSONSet", "JSONFormat",
    "JSONStripNulls", "JSONValueArray", "ParseJSON", "FromJson", "CheckJson",
)  # fmt: skip

# Arrays, lists, maps and structs (constructors, accessors, lambdas over lists).
COLLECTION_CLASSES = _classes(
    "Array", "ArraySize", "ArrayContains", "ArrayContainsAll", "ArrayContainedBy",
    "ArrayOverlaps", "ArrayPosition", "ArrayAppend", "ArrayPrepend", "ArrayConcat",
    "ArrayRemove", "ArrayDistinct", "ArrayFilter", "ArraySort", "ArrayReverse", "ArraySlice",
    "ArrayIntersect", "ArrayExcept", "ArrayMax", "ArrayMin", "ArraySum", "ArrayFirst",
    "ArrayLast", "ArrayCompact", "ArrayAll", "ArrayAny", "ArraysZip", "Transform", "Reduce",
    "Flatten", "Struct", "StructExtract", "Map", "MapKeys", "MapFromEntries", "VarMap", "List",
    "ToArray", "Explode",
)  # fmt: skip

# Who and where the session is (no paths: current_setting and friends are not here).
SESSION_INFO_CLASSES = _classes(
    "CurrentDatabase", "CurrentSchema", "CurrentSchemas", "CurrentCatalog", "CurrentUser",
    "SessionUser", "CurrentVersion",
)  # fmt: skip

# Syntax sqlglot models as functions: AND / OR / XOR, EXISTS (…), DuckDB COLUMNS(…), MySQL
# MATCH … AGAINST.
SYNTAX_CLASSES = _classes("And", "Or", "Xor", "Exists", "Columns", "MatchAgainst")

# Set-returning functions, allowed in FROM as well as in the select list.
TABLE_FUNCTION_CLASSES = _classes("GenerateSeries", "ExplodingGenerateSeries", "Unnest", "JSONTable")

FUNCTION_CLASSES: frozenset[type[exp.Expr]] = (
    AGGREGATE_CLASSES
    | WINDOW_CLASSES
    | MATH_CLASSES
    | STRING_CLASSES
    | REGEX_CLASSES
    | DATETIME_CLASSES
    | CONDITIONAL_CLASSES
    | CAST_CLASSES
    | JSON_CLASSES
    | COLLECTION_CLASSES
    | SESSION_INFO_CLASSES
    | SYNTAX_CLASSES
    | TABLE_FUNCTION_CLASSES
)

# =============================================================================================
# Functions sqlglot parses as exp.Anonymous, by SQL name, per dialect
# =============================================================================================

# Names that mean the same harmless function in every supported engine (most of these usually
# parse to a class above; listing them keeps the guard stable across sqlglot versions).
_COMMON_NAMES = _names(
    """
    count sum avg min max stddev stddev_pop stddev_samp variance var_pop var_samp corr
    covar_pop covar_samp regr_slope regr_intercept regr_r2 regr_count regr_avgx regr_avgy
    regr_sxx regr_sxy regr_syy bit_and bit_or bit_xor
    row_number rank dense_rank percent_rank cume_dist ntile lag lead first_value last_value
    nth_value
    abs ceil ceiling floor round sign sqrt power pow exp ln log log10 log2 mod pi radians degrees
    sin cos tan cot asin acos atan atan2 sinh cosh tanh asinh acosh atanh greatest least
    lower upper length char_length character_length octet_length bit_length trim ltrim rtrim
    lpad rpad substring substr left right replace reverse repeat concat concat_ws ascii md5
    position translate regexp_replace regexp_like regexp_substr regexp_instr regexp_count
    coalesce nullif
    current_date current_time current_timestamp localtime localtimestamp now extract
    """
)

# --- PostgreSQL ---
_POSTGRES_NAMES = {
    # Aggregates (ordered-set ones are used with WITHIN GROUP (ORDER BY …)).
    "aggregate": _names(
        """
        every bool_and bool_or array_agg string_agg json_agg jsonb_agg json_object_agg
        jsonb_object_agg percentile_cont percentile_disc mode range_agg range_intersect_agg
        """
    ),
    # Math.
    "math": _names(
        """
        trunc cbrt div gcd lcm scale min_scale trim_scale factorial width_bucket random
        random_normal erf erfc
        """
    ),
    # Text.
    "string": _names(
        """
        initcap btrim strpos split_part string_to_array array_to_string regexp_match
        regexp_matches regexp_split_to_array regexp_split_to_table string_to_table format
        to_char to_number starts_with chr quote_ident quote_literal quote_nullable to_hex
        encode decode convert_from convert_to sha224 sha256 sha384 sha512 unistr normalize
        overlay parse_ident casefold levenshtein levenshtein_less_equal soundex difference
        metaphone dmetaphone similarity word_similarity
        """
    ),
    # Dates and times.
    "datetime": _names(
        """
        age clock_timestamp statement_timestamp transaction_timestamp timeofday date_trunc
        date_part date_bin make_date make_time make_timestamp make_timestamptz make_interval
        to_date to_timestamp justify_days justify_hours justify_interval isfinite timezone
        date_add date_subtract
        """
    ),
    # Conditionals.
    "conditional": _names("num_nulls num_nonnulls"),
    # JSON.
    "json": _names(
        """
        to_json to_jsonb row_to_json array_to_json json_build_object jsonb_build_object
        json_build_array jsonb_build_array json_object jsonb_object json_typeof jsonb_typeof
        json_array_length jsonb_array_length json_extract_path json_extract_path_text
        jsonb_extract_path jsonb_extract_path_text jsonb_pretty json_strip_nulls
        jsonb_strip_nulls jsonb_set jsonb_set_lax jsonb_insert jsonb_path_exists
        jsonb_path_match jsonb_path_query jsonb_path_query_array jsonb_path_query_first
        json_populate_record jsonb_populate_record json_to_record jsonb_to_record json_query
        json_value json_exists json_scalar json_serialize json_array json_arrayagg
        json_objectagg
        """
    ),
    # Arrays and ranges.
    "collection": _names(
        """
        array_length cardinality array_position array_positions array_remove array_replace
        array_append array_prepend array_cat array_upper array_lower array_dims array_ndims
        array_fill trim_array array_reverse array_sort array_sample array_shuffle row isempty
        lower_inc upper_inc lower_inf upper_inf range_merge int4range int8range numrange
        daterange tsrange tstzrange
        """
    ),
    # Full-text search (NOT ts_stat / ts_rewrite: those run a query given as text).
    "full_text": _names(
        """
        to_tsvector to_tsquery plainto_tsquery phraseto_tsquery websearch_to_tsquery ts_rank
        ts_rank_cd ts_headline setweight tsvector_to_array array_to_tsvector numnode
        """
    ),
    # Set-returning functions (allowed in FROM too).
    "set_returning": _names(
        """
        generate_series unnest generate_subscripts json_each json_each_text jsonb_each
        jsonb_each_text json_array_elements json_array_elements_text jsonb_array_elements
        jsonb_array_elements_text json_object_keys jsonb_object_keys json_to_recordset
        jsonb_to_recordset json_populate_recordset jsonb_populate_recordset
        """
    ),
    # Types and describing tables (sizes, definitions, comments) — no file or server access.
    "introspection": _names(
        """
        pg_typeof format_type to_regclass to_regtype to_regnamespace obj_description
        col_description pg_get_viewdef pg_get_constraintdef pg_get_indexdef pg_get_expr
        pg_table_is_visible pg_size_pretty pg_column_size pg_relation_size pg_table_size
        pg_indexes_size pg_total_relation_size pg_input_is_valid
        """
    ),
    # Session identity and misc. Not pg_sleep / pg_sleep_for / pg_sleep_until: a delay per
    # row is a timing oracle (see "Timing" in the module docstring).
    "session": _names(
        """
        current_database current_schema current_schemas current_user session_user version
        gen_random_uuid uuidv4 uuidv7
        """
    ),
}

# --- DuckDB ---
_DUCKDB_NAMES = {
    # Aggregates.
    "aggregate": _names(
        """
        median mode quantile quantile_cont quantile_disc approx_count_distinct approx_quantile
        reservoir_quantile arg_max arg_min argmax argmin max_by min_by arg_max_null
        arg_min_null any_value arbitrary first last list array_agg string_agg group_concat
        listagg histogram product kurtosis kurtosis_pop skewness entropy count_if countif
        count_star bool_and bool_or bitstring_agg fsum sumkahan kahan_sum favg mad geomean
        geometric_mean weighted_avg json_group_array json_group_object json_group_structure
        approx_top_k sem
        """
    ),
    # Math.
    "math": _names(
        """
        trunc cbrt even round_even roundbankers random gcd lcm greatest_common_divisor
        least_common_multiple factorial isnan isinf isfinite bit_count xor gamma lgamma signbit
        nextafter fdiv fmod
        """
    ),
    # Text.
    "string": _names(
        """
        initcap strpos instr split_part string_split str_split string_split_regex
        str_split_regex regexp_split_to_array regexp_matches regexp_extract regexp_extract_all
        regexp_full_match regexp_escape format printf starts_with ends_with contains prefix
        suffix chr ord unicode levenshtein damerau_levenshtein editdist3 jaro_similarity
        jaro_winkler_similarity jaccard hamming mismatches hash sha1 sha256 md5_number hex unhex
        to_hex from_hex bin to_binary from_binary bar lcase ucase array_to_string
        nfc_normalize strip_accents like_escape ilike_escape len strlen length_grapheme
        left_grapheme right_grapheme substring_grapheme base64 to_base64 from_base64 encode
        decode url_encode url_decode format_bytes formatreadablesize
        formatreadabledecimalsize string_to_array
        """
    ),
    # Dates and times.
    "datetime": _names(
        """
        age century date_diff date_part date_sub date_trunc datediff datepart datesub
        datetrunc date_add day dayname dayofmonth dayofweek dayofyear decade epoch epoch_ms
        epoch_us epoch_ns era get_current_time get_current_timestamp current_localtime
        current_localtimestamp hour isodow isoyear julian last_day make_date make_time
        make_timestamp make_timestamptz make_timestamp_ns microsecond millennium millisecond
        minute month monthname nanosecond quarter second strftime strptime try_strptime
        time_bucket timezone timezone_hour timezone_minute to_centuries to_days to_decades
        to_hours to_microseconds to_millennia to_milliseconds to_minutes to_months to_seconds
        to_timestamp to_weeks to_years today week weekday weekofyear year yearweek
        """
    ),
    # Conditionals and types.
    "conditional": _names("if iff ifnull typeof alias"),
    # JSON.
    "json": _names(
        """
        json json_extract json_extract_string json_extract_path json_extract_path_text
        json_value json_exists json_keys json_type json_valid json_array_length json_object
        json_array json_merge_patch json_structure json_transform json_transform_strict
        from_json from_json_strict json_contains to_json json_quote array_to_json row_to_json
        json_pretty
        """
    ),
    # Lists, arrays, maps, structs and unions (including the lambda list functions).
    "collection": _names(
        """
        list_value list_pack array_value list_extract list_element array_extract list_contains
        list_has array_contains array_has list_has_any array_has_any list_has_all array_has_all
        list_sort array_sort list_reverse_sort array_reverse_sort list_distinct array_distinct
        list_unique array_unique list_filter array_filter filter list_transform array_transform
        apply list_apply array_apply list_reduce array_reduce reduce list_aggregate
        array_aggregate list_aggr array_aggr aggregate list_sum list_avg list_min list_max
        list_count list_median list_mode list_concat list_cat array_cat array_concat
        list_append array_append array_push_back list_prepend array_prepend array_push_front
        list_slice array_slice list_position list_indexof array_position array_indexof
        list_zip list_cosine_similarity array_cosine_similarity list_distance array_distance
        list_inner_product array_inner_product list_dot_product array_dot_product list_select
        array_select list_where array_where list_grade_up array_grade_up list_resize
        array_resize list_intersect array_intersect list_first list_last list_any_value
        list_reverse array_reverse array_length flatten cardinality struct_pack struct_extract
        struct_extract_at struct_insert struct_concat row map map_keys map_values map_extract
        map_extract_value element_at map_from_entries map_entries map_contains map_concat
        union_value union_extract union_tag
        """
    ),
    # Set-returning functions (allowed in FROM too).
    "set_returning": _names("range generate_series unnest json_each json_tree"),
    # Session identity and misc (no current_setting / getenv / getvariable: they reveal paths
    # and environment).
    "session": _names("current_database current_schema current_schemas version uuid gen_random_uuid"),
}
# DuckDB catalog table functions: only in FROM. Not duckdb_databases / duckdb_settings /
# duckdb_extensions / duckdb_secrets / pragma_database_list: they show paths and secrets.
DUCKDB_CATALOG_TABLE_FUNCTIONS = _names(
    """
    duckdb_tables duckdb_columns duckdb_views duckdb_schemas duckdb_types duckdb_constraints
    duckdb_indexes pragma_table_info pragma_show_tables
    """
)

# --- MySQL / MariaDB ---
_MYSQL_NAMES = {
    # Aggregates (MariaDB also has MEDIAN / PERCENTILE_* as window functions).
    "aggregate": _names(
        """
        group_concat std json_arrayagg json_objectagg any_value median percentile_cont
        percentile_disc
        """
    ),
    # Math.
    "math": _names("truncate rand conv crc32 oct bin format"),
    # Text.
    "string": _names(
        """
        lcase ucase instr locate mid substring_index field find_in_set elt space strcmp soundex
        hex unhex char ord sha sha1 sha2 uuid insert quote to_base64 from_base64 make_set
        export_set weight_string inet_aton inet_ntoa inet6_aton inet6_ntoa is_ipv4 is_ipv6
        regexp_like
        """
    ),
    # Dates and times.
    "datetime": _names(
        """
        curdate curtime sysdate utc_date utc_time utc_timestamp date time timestamp year month
        day dayofmonth dayofweek dayofyear week weekofyear weekday yearweek quarter hour minute
        second microsecond dayname monthname last_day date_format time_format str_to_date
        date_add date_sub adddate subdate datediff timestampdiff timestampadd timediff addtime
        subtime unix_timestamp from_unixtime to_days from_days to_seconds makedate maketime
        sec_to_time time_to_sec period_add period_diff convert_tz get_format
        """
    ),
    # Conditionals (INTERVAL(n, n1, …) is the bucket function, not the INTERVAL keyword).
    "conditional": _names("if ifnull isnull interval nvl nvl2"),
    # JSON.
    "json": _names(
        """
        json_extract json_unquote json_value json_query json_exists json_contains
        json_contains_path json_keys json_length json_type json_valid json_object json_array
        json_search json_depth json_quote json_merge json_merge_patch json_merge_preserve
        json_set json_insert json_replace json_remove json_array_append json_array_insert
        json_pretty json_overlaps json_detailed json_compact json_loose json_equals
        json_normalize
        """
    ),
    # Session identity and misc. Not SLEEP / BENCHMARK: timing oracles (module docstring).
    "session": _names("database schema current_user user session_user version"),
}


def _flatten(groups: dict[str, frozenset[str]]) -> frozenset[str]:
    return frozenset().union(*groups.values())


FUNCTION_NAMES: dict[str, frozenset[str]] = {
    "postgres": _COMMON_NAMES | _flatten(_POSTGRES_NAMES),
    "duckdb": _COMMON_NAMES | _flatten(_DUCKDB_NAMES),
    "mysql": _COMMON_NAMES | _flatten(_MYSQL_NAMES),
}

# Extra names allowed only in table position (FROM / JOIN / LATERAL).
TABLE_ONLY_FUNCTION_NAMES: dict[str, frozenset[str]] = {
    "postgres": frozenset(),
    "duckdb": DUCKDB_CATALOG_TABLE_FUNCTIONS,
    "mysql": frozenset(),
}

# =============================================================================================
# Catalog tables and views
# =============================================================================================

# information_schema views describing tables and columns (each engine shows only the objects
# the session's role may use, so these never show more than the role can read anyway).
_INFORMATION_SCHEMA_VIEWS = _names(
    """
    tables columns views schemata table_constraints key_column_usage referential_constraints
    constraint_column_usage check_constraints
    """
)

# PostgreSQL: pg_catalog views a describe/list query needs. Not pg_authid / pg_shadow /
# pg_user_mapping (secrets), pg_settings / pg_file_settings / pg_hba_file_rules (paths and
# configuration), pg_stat_activity and other pg_stat_* (other sessions' queries), pg_proc,
# pg_database, pg_roles ….
POSTGRES_CATALOG_VIEWS: dict[str, frozenset[str]] = {
    "information_schema": _INFORMATION_SCHEMA_VIEWS,
    "pg_catalog": _names(
        """
        pg_tables pg_views pg_matviews pg_indexes pg_namespace pg_class pg_attribute pg_type
        pg_index pg_constraint pg_description pg_enum pg_attrdef pg_inherits pg_sequences
        pg_stats
        """
    ),
}

# MySQL / MariaDB: information_schema only; mysql, performance_schema and sys are refused.
MYSQL_CATALOG_VIEWS: dict[str, frozenset[str]] = {
    "information_schema": _INFORMATION_SCHEMA_VIEWS | _names("statistics"),
}
MYSQL_SYSTEM_SCHEMAS = _names("information_schema mysql performance_schema sys")

# DuckDB: information_schema views and the catalog views (duckdb_tables … as tables too);
# pg_catalog (pg_settings shows paths) and the system / temp catalogs are refused.
DUCKDB_CATALOG_VIEWS: dict[str, frozenset[str]] = {
    "information_schema": _INFORMATION_SCHEMA_VIEWS,
}
DUCKDB_CATALOG_VIEW_NAMES = _names(
    "duckdb_tables duckdb_columns duckdb_views duckdb_schemas duckdb_types duckdb_constraints "
    "duckdb_indexes"
)
DUCKDB_SYSTEM_SCHEMAS = _names("information_schema pg_catalog")
DUCKDB_SYSTEM_CATALOGS = _names("system temp")
# Unqualified names with these prefixes resolve to DuckDB's built-in views (duckdb_settings,
# pragma_database_list, sqlite_master, pg_settings …), so they must be on the list above.
DUCKDB_SYSTEM_NAME_PREFIXES: tuple[str, ...] = ("duckdb_", "pragma_", "sqlite_", "pg_")

# DuckDB turns a missing table whose (dotted) name ends in a file extension into a file scan:
# ``FROM data.csv`` reads ./data.csv, ``FROM "/srv/x".parquet`` reads /srv/x.parquet.
DUCKDB_FILE_EXTENSIONS = _names(
    """
    csv tsv tab txt psv dat parquet pq json jsonl ndjson geojson gz gzip zst zstd bz2 xz lz4
    snappy br zip tar arrow ipc feather avro orc xlsx xls db duckdb ddb sqlite sqlite3 wal
    """
)
# Characters that never appear in a sensible table name but always in a path, URL or glob.
PATH_CHARACTERS = frozenset("/\\:~*?[]{}")

# Catalog views read by column, in the catalog's order: a reference is read through a derived
# table of these columns, so ``*``, a whole row or any other column cannot reach the rest.
# Keyed by (schema, view) folded; DuckDB's views and table functions have no schema; MySQL's
# columns in its own upper case, as ``SELECT *`` shows them. Left out:
# ``pg_attribute.attmissingval`` (the default of a column added with one: the value of every
# older row) and ``pg_stats``' sample values (most common values, histogram bounds).
CATALOG_COLUMNS: dict[str, dict[tuple[str | None, str], tuple[str, ...]]] = {
    "postgres": {
        ("pg_catalog", "pg_attribute"): _ordered(
            """
            attrelid attname atttypid attlen attnum atttypmod attndims attbyval attalign
            attstorage attnotnull atthasdef atthasmissing attidentity attgenerated attisdropped
            attislocal attinhcount attcollation attacl attoptions attfdwoptions
            """
        ),
        ("pg_catalog", "pg_stats"): _ordered(
            "schemaname tablename attname inherited null_frac avg_width n_distinct correlation"
        ),
        ("pg_catalog", "pg_class"): _ordered(
            """
            oid relname relnamespace reltype reloftype relowner relam relfilenode reltablespace
            relpages reltuples relallvisible reltoastrelid relhasindex relisshared
            relpersistence relkind relnatts relchecks relhasrules relhastriggers relhassubclass
            relrowsecurity relforcerowsecurity relispopulated relreplident relispartition
            relrewrite relfrozenxid relminmxid relacl reloptions relpartbound
            """
        ),
        ("pg_catalog", "pg_sequences"): _ordered(
            """
            schemaname sequencename sequenceowner data_type start_value min_value max_value
            increment_by cycle cache_size last_value
            """
        ),
    },
    "mysql": {
        ("information_schema", "tables"): _ordered(
            """
            TABLE_CATALOG TABLE_SCHEMA TABLE_NAME TABLE_TYPE ENGINE VERSION ROW_FORMAT
            TABLE_ROWS AVG_ROW_LENGTH DATA_LENGTH MAX_DATA_LENGTH INDEX_LENGTH DATA_FREE
            AUTO_INCREMENT CREATE_TIME UPDATE_TIME CHECK_TIME TABLE_COLLATION CHECKSUM
            CREATE_OPTIONS TABLE_COMMENT
            """
        ),
        ("information_schema", "statistics"): _ordered(
            """
            TABLE_CATALOG TABLE_SCHEMA TABLE_NAME NON_UNIQUE INDEX_SCHEMA INDEX_NAME
            SEQ_IN_INDEX COLUMN_NAME COLLATION CARDINALITY SUB_PART PACKED NULLABLE INDEX_TYPE
            COMMENT INDEX_COMMENT
            """
        ),
    },
    "duckdb": {
        (None, "duckdb_tables"): _ordered(
            """
            database_name database_oid schema_name schema_oid table_name table_oid comment tags
            internal temporary has_primary_key estimated_size column_count index_count
            check_constraint_count sql
            """
        ),
    },
}

# The columns left out above that hold values of table rows: naming one gets a clear refusal.
CATALOG_VALUE_COLUMNS = _names(
    """
    attmissingval most_common_vals most_common_freqs histogram_bounds most_common_elems
    most_common_elem_freqs elem_count_histogram
    """
)

# Catalog columns and functions that count or size a table's rows. Where the access policy
# filters rows of any table of a source for an audience, that audience reads none of them, on
# any table of the source: ``search_schema`` likewise shows no row count of a filtered table,
# and a count per table would leak through its indexes (``reltuples`` of ``orders_pkey``),
# sequences, partitions and TOAST tables. See ``agent_core.governance.rewrite``.
ROW_COUNT_COLUMNS = _names(
    """
    relpages reltuples relallvisible last_value table_rows avg_row_length data_length
    max_data_length index_length data_free auto_increment checksum cardinality estimated_size
    """
)
ROW_COUNT_FUNCTIONS = _names(
    "pg_relation_size pg_table_size pg_total_relation_size pg_indexes_size"
)
