-- 0010: number reserved for another change of issue 23 (placeholder so that
-- this branch migrates without a gap; replaced by that change's file).
SELECT 1;
