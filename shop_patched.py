from replay_shop import shop

registry = shop("patched").registry
