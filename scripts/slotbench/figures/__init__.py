"""The figures, seaborn: the report's (plots), the thermal annotation (thermal), the open loop's
(openloop), and every caption, written once (captions)."""
