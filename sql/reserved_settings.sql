-- Settings named jobflow.* are jobflow's: one it does not define is an
-- error on 15 and later (expected/reserved_settings.out); PostgreSQL 14
-- cannot refuse it and accepts it as a placeholder
-- (expected/reserved_settings_1.out).
SET jobflow.no_such_setting = 1;
SELECT current_setting('jobflow.no_such_setting', true) AS placeholder;
