"""The route table: which source kind reaches which format through which conversion steps, and
what each route honours. It stands above the sources, the steps and the formats it joins (and
above ``conversion/``, the forms and converter children they share); the packager and the
command line read it."""
