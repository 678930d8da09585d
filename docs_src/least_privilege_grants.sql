-- after `firefly-orm migrate --url postgresql://owner@db/app --schema firefly_memory`
GRANT USAGE ON SCHEMA firefly_memory TO firefly_app;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA firefly_memory TO firefly_app;
