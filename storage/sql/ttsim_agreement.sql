-- How opbyop's device model agrees with ttsim on the unique ops of $run_id that ran on both, per
-- op kind: bit-equal, within 4 ulps, different (and what kind of difference: rounding within 2**-10
-- of the output's scale, sign, magnitude, nonfinite, shape), the model failing where ttsim ran; the
-- largest distance in ulps and against the output's scale.
SELECT op_name,
       count(*) AS programs,
       count(*) FILTER (WHERE ttsim_agreement = 'bit_equal') AS bit_equal,
       count(*) FILTER (WHERE ttsim_agreement = 'within_ulps') AS within_ulps,
       count(*) FILTER (WHERE ttsim_agreement = 'differ') AS differ,
       count(*) FILTER (WHERE ttsim_agreement = 'model_failed') AS model_failed,
       string_agg(DISTINCT ttsim_difference, ', ' ORDER BY ttsim_difference)
           FILTER (WHERE ttsim_agreement = 'differ') AS differences,
       max(ttsim_max_ulps) AS max_ulps,
       max(ttsim_max_error) AS max_error
FROM results
WHERE run_id = $run_id AND ttsim_agreement IS NOT NULL
GROUP BY op_name
ORDER BY differ DESC, model_failed DESC, within_ulps DESC, op_name
