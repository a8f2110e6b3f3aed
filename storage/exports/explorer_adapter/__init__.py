"""opbyop's Model Explorer extension: Model Explorer imports an extension as `<package>.main`."""
