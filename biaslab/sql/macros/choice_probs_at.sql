-- Exact forced-choice probabilities re-derived from stored trie evidence (docs/design.md section 6), at any
-- temperature and any top_k <= the stored K, without the model:
--   SELECT * FROM choice_probs_at(0.3, 20);                        -- the forced-choice (protocol 'choice') requests
--   SELECT * FROM choice_probs_at(0.3, 20, protocol_name := 'meta');  -- comprehension questions; NULL: all
-- Each row names its request's protocol, so answers of different protocols are never averaged together unawares.
-- At each node, p(token) = 1[z >= z_(k)] exp((z - z_max) / T) / sum_{j : z_j >= z_(k)} exp((z_j - z_max) / T);
-- a path's probability is the product over its edges; option probabilities sum the paths the parser maps to them;
-- 'unresolved' is the mass of branches pruned at collection time; 'invalid' is the rest (1 - all of the above).
-- A node stores its top K (k_store) logits plus every further token tied with the K-th (exact.top_k_with_ties), so
-- the threshold z_(k) keeps all its ties for every k <= K, as the sampler does.
-- Computed in DOUBLE whatever literals are given (a DECIMAL temperature would otherwise make DuckDB compute in
-- FLOAT). Refused with an error: temperature <= 0 or NULL, k < 1, and k above the K stored at a node.
CREATE OR REPLACE TEMP MACRO choice_probs_at(temp, k, protocol_name := 'choice') AS TABLE
WITH RECURSIVE
requests AS (
    SELECT r.model_key, r.request_id, r.protocol AS request_protocol, r.options, r.k_store
    FROM choice_requests r
    WHERE r.mode = 'exact' AND (protocol_name IS NULL OR r.protocol = protocol_name)
),
settings AS (
    SELECT CASE WHEN temp::DOUBLE > 0 THEN temp::DOUBLE
                ELSE error('choice_probs_at: temperature must be > 0, got ' || coalesce(temp::VARCHAR, 'NULL')) END AS t,
           CASE WHEN k::INTEGER >= 1 THEN k::INTEGER
                ELSE error('choice_probs_at: top_k must be at least 1, got ' || coalesce(k::VARCHAR, 'NULL')) END AS kk
),
stored AS (
    SELECT n.model_key, n.request_id, n.node_id, n.topk_ids, n.topk_logits::DOUBLE[] AS z, s.t, s.kk,
           CASE WHEN s.kk <= coalesce(r.k_store, len(n.topk_logits)) THEN s.kk
                ELSE error('choice_probs_at: top_k ' || s.kk || ' exceeds the '
                           || coalesce(r.k_store, len(n.topk_logits))
                           || ' logits stored per node (k_store); collect again with a larger --k-store') END AS kpos
    FROM choice_nodes n JOIN requests r USING (model_key, request_id) CROSS JOIN settings s
),
node_p AS (
    SELECT model_key, request_id, node_id, topk_ids, z AS topk_logits, t,
           z[kpos] AS kth,
           z[1] AS zmax,
           list_sum(list_transform(list_filter(z, lambda v: v >= z[kpos]),
                                   lambda v: exp((v - z[1]) / t))) AS norm
    FROM stored
),
edge_p AS (
    SELECT e.model_key, e.request_id, e.node_id, e.outcome, e.child_id,
           CASE WHEN z >= n.kth THEN exp((z - n.zmax) / n.t) / n.norm ELSE 0.0 END AS p
    FROM (
        SELECT e.*, n.topk_logits[list_position(n.topk_ids, e.token_id)] AS z
        FROM choice_edges e JOIN node_p n USING (model_key, request_id, node_id)
    ) e JOIN node_p n USING (model_key, request_id, node_id)
),
walk(model_key, request_id, node_id, mass) AS (
    SELECT model_key, request_id, 0, 1.0::DOUBLE FROM choice_nodes JOIN requests USING (model_key, request_id)
    WHERE node_id = 0
    UNION ALL
    SELECT w.model_key, w.request_id, e.child_id, w.mass * e.p
    FROM walk w JOIN edge_p e
      ON e.model_key = w.model_key AND e.request_id = w.request_id AND e.node_id = w.node_id
    WHERE e.outcome = '__live__' AND e.p > 0
),
ended AS (
    SELECT w.model_key, w.request_id,
           CASE WHEN e.outcome = '__pruned__' THEN 'unresolved' ELSE e.outcome END AS option,
           w.mass * e.p AS p
    FROM walk w JOIN edge_p e USING (model_key, request_id, node_id)
    WHERE e.outcome <> '__live__'
),
outcomes AS (
    SELECT model_key, request_id, request_protocol, unnest(list_concat(options, ['unresolved'])) AS option
    FROM requests
),
resolved AS (
    SELECT o.model_key, o.request_id, o.request_protocol, o.option, coalesce(sum(e.p), 0.0) AS prob
    FROM outcomes o LEFT JOIN ended e USING (model_key, request_id, option)
    GROUP BY ALL
)
SELECT model_key, request_id, option, prob, temp::DOUBLE AS temperature, k::INTEGER AS top_k,
       request_protocol AS protocol
FROM resolved
UNION ALL
SELECT model_key, request_id, 'invalid', greatest(0.0, 1.0 - sum(prob)), temp::DOUBLE, k::INTEGER, request_protocol
FROM resolved GROUP BY ALL;
